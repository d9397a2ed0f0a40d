//! [`Item`] and [`ItemRef`]: an item as a read returns it, owned or borrowed — shared by the
//! single client, the batch gatherers ([`crate::hits`]) and the pool.

/// An item as a get returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// The value.
    pub value: Vec<u8>,
    /// The client flags stored with it.
    pub flags: u32,
    /// Its CAS unique (for [`Client::cas`]).
    pub cas: u64,
}

/// An item as read, its value borrowed from where it was read into (a local reader's buffer
/// or an answer being parsed): [`Pool::get_many_each`](crate::Pool::get_many_each) hands
/// these out so that a batch copies each value once, into wherever the caller keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemRef<'a> {
    /// The value.
    pub value: &'a [u8],
    /// The client flags stored with it.
    pub flags: u32,
    /// Its CAS unique.
    pub cas: u64,
}

impl ItemRef<'_> {
    /// An owned copy.
    pub fn to_item(&self) -> Item {
        Item { value: self.value.to_vec(), flags: self.flags, cas: self.cas }
    }
}

impl Item {
    /// The item, borrowed.
    pub fn as_ref(&self) -> ItemRef<'_> {
        ItemRef { value: &self.value, flags: self.flags, cas: self.cas }
    }
}

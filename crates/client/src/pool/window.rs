//! Facebook's sliding window (Scaling Memcache §3.1): how many requests of one batch a client
//! keeps outstanding at once. Too small a window serialises a fan-out; too large a window lets
//! every answer arrive at once and overflow switch buffers and socket queues (incast). Like
//! TCP's congestion window it grows by one with each answer that arrived in time and halves
//! when one times out.

/// Limits of the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowOptions {
    /// Outstanding requests a new pool starts with.
    pub initial: usize,
    /// The most it grows to.
    pub max: usize,
}

impl Default for WindowOptions {
    fn default() -> WindowOptions {
        WindowOptions { initial: 8, max: 64 }
    }
}

/// The window's current size, between 1 and its maximum.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    size: usize,
    max: usize,
}

impl Window {
    pub(crate) fn new(options: WindowOptions) -> Window {
        let max = options.max.max(1);
        Window { size: options.initial.clamp(1, max), max }
    }

    /// How many requests may be outstanding now.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// An answer arrived in time: additive increase.
    pub(crate) fn on_success(&mut self) {
        self.size = (self.size + 1).min(self.max);
    }

    /// A request timed out: multiplicative decrease.
    pub(crate) fn on_timeout(&mut self) {
        self.size = (self.size / 2).max(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_by_one_and_halves_within_bounds() {
        let mut w = Window::new(WindowOptions { initial: 4, max: 6 });
        w.on_success();
        w.on_success();
        w.on_success();
        assert_eq!(w.size(), 6);
        w.on_timeout();
        assert_eq!(w.size(), 3);
        for _ in 0..5 {
            w.on_timeout();
        }
        assert_eq!(w.size(), 1);
        assert_eq!(Window::new(WindowOptions { initial: 0, max: 0 }).size(), 1);
        assert_eq!(Window::new(WindowOptions { initial: 100, max: 10 }).size(), 10);
    }
}

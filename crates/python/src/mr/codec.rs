//! How `shoal.mr` stores Python keys and values in the job region: one tag byte, then the
//! value. Keys sort as these bytes, which keeps each type's own order (bytes and str by their
//! bytes, i.e. str by code point; ints numerically), so a job's result comes back in key order.
//!
//! ```text
//! b  bytes     raw bytes            s  str    UTF-8
//! i  int       8 bytes big-endian, sign bit flipped (64-bit only)
//! f  float     8 bytes, IEEE 754 little-endian
//! T / F  True / False               n  None
//! E  a combine that raised: its traceback (values only; it wins every later combine)
//! ```

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyString};

/// The tag of a value that stands for a combine's exception.
pub(crate) const FAILED: u8 = b'E';

/// Appends the encoding of `object` to `out`.
pub(crate) fn encode(object: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> PyResult<()> {
    // Most frequent first: word counts' str keys and int values.
    if let Ok(s) = object.cast::<PyString>() {
        out.push(b's');
        out.extend_from_slice(s.to_str()?.as_bytes());
    } else if let Ok(b) = object.cast::<PyBool>() {
        out.push(if b.is_true() { b'T' } else { b'F' });
    } else if object.is_instance_of::<PyInt>() {
        let n: i64 = object.extract().map_err(|_| {
            PyTypeError::new_err(format!(
                "shoal.mr stores ints of 64 bits; {object} does not fit (return it as str or bytes)"
            ))
        })?;
        out.push(b'i');
        out.extend_from_slice(&((n as u64) ^ (1 << 63)).to_be_bytes());
    } else if let Ok(b) = object.cast::<PyBytes>() {
        out.push(b'b');
        out.extend_from_slice(b.as_bytes());
    } else if let Ok(f) = object.cast::<PyFloat>() {
        out.push(b'f');
        out.extend_from_slice(&f.value().to_le_bytes());
    } else if object.is_none() {
        out.push(b'n');
    } else {
        let type_name = object.get_type().name()?;
        return Err(PyTypeError::new_err(format!(
            "shoal.mr keys and values are bytes, str, int, float, bool or None, not {type_name}"
        )));
    }
    Ok(())
}

/// The Python value `bytes` encode; `Err` names what is wrong (a damaged region, or bytes
/// written by something else).
pub(crate) fn decode<'py>(py: Python<'py>, bytes: &[u8]) -> Result<Bound<'py, PyAny>, String> {
    let (&tag, body) = bytes.split_first().ok_or("an empty encoded value")?;
    let word = || -> Result<[u8; 8], String> {
        body.try_into()
            .map_err(|_| format!("a value tagged {:?} of {} bytes, not 8", tag as char, body.len()))
    };
    Ok(match tag {
        b's' => {
            PyString::new(py, std::str::from_utf8(body).map_err(|e| format!("a str value: {e}"))?).into_any()
        }
        b'b' => PyBytes::new(py, body).into_any(),
        b'i' => (u64::from_be_bytes(word()?) ^ (1 << 63))
            .cast_signed()
            .into_pyobject(py)
            .map_err(|e| e.to_string())?
            .into_any(),
        b'f' => PyFloat::new(py, f64::from_le_bytes(word()?)).into_any(),
        b'T' => PyBool::new(py, true).to_owned().into_any(),
        b'F' => PyBool::new(py, false).to_owned().into_any(),
        b'n' => py.None().into_bound(py),
        _ => return Err(format!("an encoded value with the unknown tag {tag:#04x}")),
    })
}

/// `a + b` if both encode ints (whose sum fits) or both floats: `shoal.mr.add` without
/// Python. `None`: Python must add them (other types, or an int past 64 bits, which then
/// fails as it would from any combine).
pub(crate) fn add(a: &[u8], b: &[u8]) -> Option<Vec<u8>> {
    let word = |bytes: &[u8]| -> Option<[u8; 8]> { bytes.get(1..)?.try_into().ok() };
    let (x, y) = (word(a)?, word(b)?);
    let mut sum = Vec::with_capacity(9);
    match (a[0], b[0]) {
        (b'i', b'i') => {
            let int = |w: [u8; 8]| (u64::from_be_bytes(w) ^ (1 << 63)).cast_signed();
            let total = int(x).checked_add(int(y))?;
            sum.push(b'i');
            sum.extend_from_slice(&(total.cast_unsigned() ^ (1 << 63)).to_be_bytes());
        }
        (b'f', b'f') => {
            sum.push(b'f');
            sum.extend_from_slice(&(f64::from_le_bytes(x) + f64::from_le_bytes(y)).to_le_bytes());
        }
        _ => return None,
    }
    Some(sum)
}

/// The encoding of `object`, for values built outside a loop.
pub(crate) fn encoded(object: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let mut out = Vec::new();
    encode(object, &mut out)?;
    Ok(out)
}

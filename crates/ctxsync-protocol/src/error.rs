//! The one error of wire parsing: which field of a request breaks which rule. Every
//! conversion from a wire message returns it, and it maps to gRPC `InvalidArgument`.

use std::fmt;

use crate::limits::MAX_COUNTER;

/// A request that breaks a wire limit, naming the field (e.g. `resources[3].source`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {problem}")]
pub struct WireError {
    /// The offending field's path in the request, e.g. `resources[3].source`.
    pub field: String,
    /// What is wrong with it.
    pub problem: Problem,
}

/// What is wrong with a field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A repeated field with more entries than allowed.
    TooMany {
        /// How many entries it has.
        count: usize,
        /// The most allowed.
        max: usize,
    },
    /// A string or body longer than allowed.
    TooLong {
        /// Its length in bytes (for a body, its encoded size).
        bytes: usize,
        /// The most bytes allowed.
        max: usize,
    },
    /// A string that must not be empty is.
    Empty,
    /// A resource's source repeats an earlier resource's.
    Duplicate,
    /// A number above its maximum.
    OutOfRange {
        /// The value sent.
        value: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// An enum value this version of the protocol does not know (or `UNSPECIFIED` where a
    /// value is required).
    UnknownEnum {
        /// The value sent.
        value: i32,
    },
    /// A field that must be set is not.
    Missing,
    /// A JSON-encoded field that is not a JSON object, with the parser's reason.
    InvalidJson(String),
    /// A value this field may not hold, with the reason.
    Invalid(&'static str),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooMany { count, max } => write!(f, "{count} entries, at most {max} allowed"),
            Self::TooLong { bytes, max } => write!(f, "{bytes} bytes, at most {max} allowed"),
            Self::Empty => f.write_str("must not be empty"),
            Self::Duplicate => f.write_str("duplicates an earlier resource's source"),
            Self::OutOfRange { value, max } => write!(f, "{value} is above the maximum {max}"),
            Self::UnknownEnum { value } => write!(f, "unknown value {value}"),
            Self::Missing => f.write_str("must be set"),
            Self::InvalidJson(reason) => write!(f, "not valid JSON: {reason}"),
            Self::Invalid(reason) => f.write_str(reason),
        }
    }
}

impl WireError {
    /// An error for `field` (its path in the request).
    pub fn new(field: impl Into<String>, problem: Problem) -> Self {
        Self {
            field: field.into(),
            problem,
        }
    }
}

#[cfg(feature = "grpc")]
impl From<WireError> for tonic::Status {
    fn from(error: WireError) -> Self {
        tonic::Status::invalid_argument(error.to_string())
    }
}

/// Refuses `text` longer than `max` bytes; the field's path is built only on failure.
pub(crate) fn max_len(
    field: impl FnOnce() -> String,
    text: &str,
    max: usize,
) -> Result<(), WireError> {
    if text.len() > max {
        return Err(WireError::new(
            field(),
            Problem::TooLong {
                bytes: text.len(),
                max,
            },
        ));
    }
    Ok(())
}

/// Refuses a counter above [`MAX_COUNTER`] (it is stored as a signed 64-bit integer).
pub(crate) fn max_counter(field: impl FnOnce() -> String, value: u64) -> Result<(), WireError> {
    if value > MAX_COUNTER {
        return Err(WireError::new(
            field(),
            Problem::OutOfRange {
                value,
                max: MAX_COUNTER,
            },
        ));
    }
    Ok(())
}

/// Refuses more than `max` entries of a repeated field.
pub(crate) fn max_entries(
    field: impl FnOnce() -> String,
    count: usize,
    max: usize,
) -> Result<(), WireError> {
    if count > max {
        return Err(WireError::new(field(), Problem::TooMany { count, max }));
    }
    Ok(())
}

/// `text` within `max` bytes, or a [`Problem::TooLong`] naming `field`.
pub(crate) fn bounded(field: &str, text: &str, max: usize) -> Result<(), WireError> {
    if text.len() > max {
        return Err(WireError::new(
            field,
            Problem::TooLong {
                bytes: text.len(),
                max,
            },
        ));
    }
    Ok(())
}

/// `text` non-empty and within `max` bytes, or the problem naming `field`.
pub(crate) fn required(field: &str, text: &str, max: usize) -> Result<(), WireError> {
    if text.is_empty() {
        return Err(WireError::new(field, Problem::Empty));
    }
    bounded(field, text, max)
}

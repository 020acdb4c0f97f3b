//! A command-line value that must never be shown: a token, or a database URL that may
//! carry a password. Its `Debug` is `[redacted]`, so a derived `Debug` of the arguments
//! that hold it (or a stray `{:?}`) cannot print it.

use std::convert::Infallible;
use std::str::FromStr;

/// A value that must never be shown; parsed from any string.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The value itself, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The value itself, taking ownership.
    pub fn into_inner(self) -> String {
        self.0
    }
}

impl FromStr for Secret {
    type Err = Infallible;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Ok(Self(value.to_owned()))
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let secret: Secret = "postgres://u:hunter2@h/db".parse().unwrap();
        assert_eq!(format!("{secret:?}"), "[redacted]");
        assert_eq!(format!("{:?}", Some(secret.clone())), "Some([redacted])");
        assert_eq!(secret.expose(), "postgres://u:hunter2@h/db");
    }
}

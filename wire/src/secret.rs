//! A string that must not leak into logs: passwords, SASL credentials, keys.
//!
//! [`Secret`] deliberately implements neither `Display` nor a revealing
//! `Debug`; the value is reachable only through [`Secret::expose`], which makes
//! every use greppable. On drop the backing buffer (including spare capacity)
//! is overwritten with zeros. This is best effort only: it is done without
//! `unsafe`, so copies made before the `Secret` was built (for example by a
//! `String` reallocating while it grew) are out of its reach.

use std::fmt;

/// A password or key, redacted in `Debug` output and zeroed on drop.
#[derive(Clone, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself. Keep the borrow short and never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the secret is the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Secret(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        let mut bytes = std::mem::take(&mut self.0).into_bytes();
        // Writing zeros up to the capacity never reallocates, so this covers
        // the whole allocation, including bytes left over from truncation.
        let capacity = bytes.capacity();
        bytes.clear();
        bytes.resize(capacity, 0);
        std::hint::black_box(&mut bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_is_redacted() {
        let secret = Secret::new("hunter2-correct-horse");
        let debug = format!("{secret:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert_eq!(debug, "***");
        // Also when nested in another type's derived Debug.
        #[derive(Debug)]
        #[allow(dead_code)]
        struct Config {
            user: String,
            password: Secret,
        }
        let config = Config {
            user: "alice".into(),
            password: secret.clone(),
        };
        let debug = format!("{config:?} {config:#?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("alice"));
    }

    #[test]
    fn expose_and_conversions() {
        let secret = Secret::new(String::from("pencil"));
        assert_eq!(secret.expose(), "pencil");
        assert_eq!(secret.clone().expose(), "pencil");
        assert_eq!(Secret::from("a").expose(), "a");
        assert_eq!(Secret::from(String::from("b")).expose(), "b");
        assert!(Secret::default().is_empty());
        assert!(!secret.is_empty());
    }

    #[test]
    fn drop_with_spare_capacity_does_not_panic() {
        let mut s = String::with_capacity(64);
        s.push_str("truncated-secret");
        s.truncate(3);
        drop(Secret::new(s));
        drop(Secret::new(String::new()));
    }
}

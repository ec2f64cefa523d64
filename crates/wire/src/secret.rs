//! The cluster's secret: 32 random bytes every member process knows, kept in a file
//! as 64 hex digits (`somnus up` writes it with mode 0600). Peers prove they know it
//! in the handshake; it never crosses the wire.

use std::fmt;

/// Bytes of the secret.
pub const SECRET_BYTES: usize = 32;

#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret([u8; SECRET_BYTES]);

/// Why a secret file's text is not a secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("a cluster secret is {want} hex digits; this one has {got}")]
    Length { got: usize, want: usize },
    #[error("a cluster secret is hex digits; found {found:?} at position {position}")]
    NotHex { found: char, position: usize },
}

impl ClusterSecret {
    pub fn from_bytes(bytes: [u8; SECRET_BYTES]) -> ClusterSecret {
        ClusterSecret(bytes)
    }

    pub(crate) fn key(&self) -> &[u8; SECRET_BYTES] {
        &self.0
    }

    /// Parses the file's text: 64 hex digits, surrounding whitespace ignored.
    pub fn parse(text: &str) -> Result<ClusterSecret, SecretError> {
        let digits = text.trim();
        if digits.chars().count() != 2 * SECRET_BYTES {
            return Err(SecretError::Length {
                got: digits.chars().count(),
                want: 2 * SECRET_BYTES,
            });
        }
        let mut bytes = [0u8; SECRET_BYTES];
        for (position, found) in digits.chars().enumerate() {
            let value = found.to_digit(16).ok_or(SecretError::NotHex { found, position })?;
            bytes[position / 2] = (bytes[position / 2] << 4) | value as u8;
        }
        Ok(ClusterSecret(bytes))
    }

    /// The file's text: 64 lowercase hex digits and a newline.
    pub fn to_file_text(&self) -> String {
        let mut text: String = self.0.iter().map(|byte| format!("{byte:02x}")).collect();
        text.push('\n');
        text
    }
}

impl ClusterSecret {
    /// The bearer token of the operator's HTTP commands (`somnus gear set`): a keyed
    /// hash of the secret, so the secret itself never crosses the wire, as 64 hex
    /// digits.
    pub fn operator_token(&self) -> String {
        let hash = blake3::keyed_hash(&self.0, b"somnus operator token v1");
        hash.as_bytes().iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// A key for `context` (a string naming its one use), derived from the secret with
    /// BLAKE3's key derivation: knowing it tells nothing of the secret or of another
    /// context's key.
    pub fn derived_key(&self, context: &str) -> [u8; SECRET_BYTES] {
        blake3::derive_key(context, &self.0)
    }

    /// Whether `token` is the operator token (compared in constant time).
    pub fn is_operator_token(&self, token: &str) -> bool {
        let expected = blake3::keyed_hash(&self.0, b"somnus operator token v1");
        match ClusterSecret::parse(token) {
            Ok(given) => expected == blake3::Hash::from(given.0),
            Err(_) => false,
        }
    }
}

/// Never printed: a log line must not leak it.
impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_round_trips_through_its_file_text_and_bad_text_is_named() {
        let secret = ClusterSecret::from_bytes(std::array::from_fn(|i| (i * 7) as u8));
        let text = secret.to_file_text();
        assert_eq!(text.len(), 65);
        assert_eq!(ClusterSecret::parse(&format!("  {text}  ")), Ok(secret.clone()));
        assert_eq!(format!("{secret:?}"), "ClusterSecret(..)");
        assert_eq!(ClusterSecret::parse("abc"), Err(SecretError::Length { got: 3, want: 64 }));
        let token = secret.operator_token();
        assert!(secret.is_operator_token(&token));
        assert!(!secret.is_operator_token(text.trim()), "the secret is not the token");
        assert!(!ClusterSecret::from_bytes([9; 32]).is_operator_token(&token));
        assert!(!secret.is_operator_token("not hex"));
        let mut bad = text.trim().to_string();
        bad.replace_range(10..11, "g");
        assert_eq!(
            ClusterSecret::parse(&bad),
            Err(SecretError::NotHex { found: 'g', position: 10 })
        );
        let multibyte = "é".repeat(64);
        assert!(matches!(
            ClusterSecret::parse(&multibyte),
            Err(SecretError::NotHex { position: 0, .. })
        ));
    }
}

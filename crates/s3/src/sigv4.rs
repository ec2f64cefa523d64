//! AWS Signature Version 4 for a client's requests (`somnus bench s3` signs its own;
//! the gateway's checks are s3s's). The body is sent as `UNSIGNED-PAYLOAD`, as S3
//! allows, so the client spends no time hashing what it sends.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use crate::store::hex;

/// The hash S3 takes in place of the payload's.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// `text` percent-encoded as SigV4 wants a path: every byte but the unreserved ones
/// and `/`.
pub fn encode_path(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// What a request is signed with.
pub struct Signer {
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
}

impl Signer {
    /// The `Authorization` header of a request: `path` already encoded, `query` in
    /// canonical form (sorted, encoded; empty if none), `headers` lower-case names
    /// with their values (`host`, `x-amz-date` and `x-amz-content-sha256` among them),
    /// `amz_date` as `YYYYMMDDTHHMMSSZ`.
    pub fn authorization(
        &self,
        method: &str,
        path: &str,
        query: &str,
        headers: &[(&str, &str)],
        payload_hash: &str,
        amz_date: &str,
    ) -> String {
        let mut headers: Vec<(String, String)> =
            headers.iter().map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_owned())).collect();
        headers.sort();
        let canonical_headers: String = headers.iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
        let signed: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
        let signed = signed.join(";");
        let canonical =
            format!("{method}\n{path}\n{query}\n{canonical_headers}\n{signed}\n{payload_hash}");
        let date = amz_date.get(..8).unwrap_or(amz_date);
        let scope = format!("{date}/{}/s3/aws4_request", self.region);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            hex(&Sha256::digest(canonical.as_bytes()))
        );
        let mut key = hmac(format!("AWS4{}", self.secret_key).as_bytes(), date.as_bytes());
        for part in [self.region.as_bytes(), b"s3", b"aws4_request"] {
            key = hmac(&key, part);
        }
        let signature = hex(&hmac(&key, to_sign.as_bytes()));
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
            self.access_key
        )
    }
}

/// `YYYYMMDDTHHMMSSZ` of a time in seconds since the epoch (UTC).
pub fn amz_date(unix_seconds: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(unix_seconds)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year(),
        t.month() as u8,
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's own example ("Signature Calculations for the Authorization Header:
    /// Transferring Payload in a Single Chunk", GET Object): its signature, exactly.
    #[test]
    fn the_signature_of_aws_documented_get_object_example() {
        let signer = Signer {
            access_key: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            region: "us-east-1".into(),
        };
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let authorization = signer.authorization(
            "GET",
            "/test.txt",
            "",
            &[
                ("Host", "examplebucket.s3.amazonaws.com"),
                ("Range", "bytes=0-9"),
                ("x-amz-content-sha256", empty),
                ("x-amz-date", "20130524T000000Z"),
            ],
            empty,
            "20130524T000000Z",
        );
        assert_eq!(
            authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn dates_and_paths_are_in_sigv4_form() {
        assert_eq!(amz_date(1_369_353_600), "20130524T000000Z");
        assert_eq!(encode_path("/b/a key+ü"), "/b/a%20key%2B%C3%BC");
    }
}

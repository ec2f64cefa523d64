//! Where S3 clients expect an answer the protocol crate gives otherwise, mended at the
//! HTTP layer, before and after it: a presigned URL's expiry limits, a request signed
//! both by header and by query refused, a request signed with `Date` rather than
//! `X-Amz-Date`, the headers of features out of scope refused, storage classes checked,
//! control characters in a listing encoded, and a request id on every answer.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use s3s::s3_error;
use time::format_description::well_known::Rfc2822;
use time::{OffsetDateTime, UtcOffset};

/// A presigned URL's `X-Amz-Expires` S3 refuses: not a whole number of seconds from
/// 1 to 604,800 (seven days). The protocol crate takes any, and calls a negative one
/// a request that is not presigned.
pub(crate) fn presign_expiry_refused(query: &str) -> Option<s3s::S3Error> {
    let value = query.split('&').find_map(|pair| pair.strip_prefix("X-Amz-Expires="))?;
    match value.parse::<i64>() {
        Ok(seconds) if (1..=604_800).contains(&seconds) => None,
        _ => Some(s3_error!(
            AccessDenied,
            "X-Amz-Expires {value:?}: a presigned URL lasts 1 to 604,800 seconds"
        )),
    }
}

/// A request signed both ways, by an `Authorization` header and by a presigned URL's
/// query (`X-Amz-Algorithm`, `-Credential`, `-Signature`): S3 refuses it, and the
/// protocol crate checks only the header. Refused, so that whoever holds a presigned
/// URL cannot send its query with its signature as a header, a request that would be
/// good for the clock skew allowed (15 minutes) rather than for the URL's expiry.
pub(crate) fn two_signatures_refused(headers: &HeaderMap, query: &str) -> Option<s3s::S3Error> {
    const PRESIGN: [&str; 3] = ["X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature"];
    if !headers.contains_key(http::header::AUTHORIZATION) {
        return None;
    }
    let name = |pair: &str| percent_decoded(pair.split('=').next().unwrap_or(""));
    query.split('&').any(|pair| PRESIGN.contains(&name(pair).as_str())).then(|| {
        s3_error!(
            InvalidArgument,
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, \
             Signature query string parameter or the Authorization header should be specified"
        )
    })
}

/// `text` with its `%XX` escapes decoded (the signature is over the decoded query,
/// so an escaped name is the same name).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                i += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// Gives a Signature V4 request signed with a `Date` header the `X-Amz-Date` the
/// protocol crate wants. SigV4 takes its time from either: botocore, given a `Date`,
/// signs with it and sends no `X-Amz-Date`. The time in the string to sign is the same
/// instant in ISO 8601 basic form, which is what is added. The header added is not
/// one of the signed headers, so the signature is still checked over what was signed;
/// a wrong time still fails it.
pub(crate) fn date_as_amz_date(headers: &mut HeaderMap) {
    const AMZ_DATE: &str = "x-amz-date";
    let sigv4 = headers
        .get(http::header::AUTHORIZATION)
        .is_some_and(|a| a.as_bytes().starts_with(b"AWS4-HMAC-SHA256 "));
    if !sigv4 || headers.contains_key(AMZ_DATE) {
        return;
    }
    let Some(date) = headers.get(http::header::DATE).and_then(|d| d.to_str().ok()) else {
        return;
    };
    // A date that does not parse is left for the protocol crate to refuse.
    let Ok(time) = OffsetDateTime::parse(date.trim(), &Rfc2822) else { return };
    let t = time.to_offset(UtcOffset::UTC);
    let basic = format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    if let Ok(value) = HeaderValue::from_str(&basic) {
        headers.insert(AMZ_DATE, value);
    }
}

/// Headers that ask for a feature the gateway does not have (docs/s3-compat.md, "Out
/// of scope"): a request carrying one is refused `NotImplemented`, so that nobody
/// believes an object encrypted, tagged, locked or redirected when it is not.
const OUT_OF_SCOPE: [&str; 8] = [
    "x-amz-server-side-encryption",
    "x-amz-copy-source-server-side-encryption",
    "x-amz-tagging",
    "x-amz-object-lock-",
    "x-amz-grant-",
    "x-amz-website-redirect-location",
    "x-amz-bucket-object-lock-enabled",
    "x-amz-bucket-object-lock-token",
];

/// A write (PUT or POST) that asks for a feature out of scope: `NotImplemented`,
/// naming the header. `x-amz-bucket-object-lock-enabled: false` asks for nothing.
pub(crate) fn out_of_scope_refused(
    method: &http::Method,
    headers: &HeaderMap,
) -> Option<s3s::S3Error> {
    if method != http::Method::PUT && method != http::Method::POST {
        return None;
    }
    let name = headers.keys().map(|n| n.as_str()).find(|name| {
        let asks = OUT_OF_SCOPE.iter().any(|prefix| name.starts_with(prefix));
        let disabled = *name == "x-amz-bucket-object-lock-enabled"
            && headers.get(*name).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"false"));
        asks && !disabled
    })?;
    Some(s3_error!(
        NotImplemented,
        "{name}: server-side encryption, tagging, object lock, grants and website \
         redirects are not supported by this gateway (docs/s3-compat.md)"
    ))
}

/// The storage classes this gateway has: every object is replicated r times.
pub(crate) const STORAGE_CLASSES: [&str; 1] = ["STANDARD"];

/// A write whose `x-amz-storage-class` is none of [`STORAGE_CLASSES`]:
/// `InvalidStorageClass` (400), as S3 answers a class it does not know.
pub(crate) fn storage_class_refused(headers: &HeaderMap) -> Option<s3s::S3Error> {
    let class = headers.get("x-amz-storage-class")?;
    let class = String::from_utf8_lossy(class.as_bytes());
    if STORAGE_CLASSES.contains(&class.as_ref()) {
        return None;
    }
    Some(s3_error!(
        InvalidStorageClass,
        "storage class {class:?}: this gateway stores {}",
        STORAGE_CLASSES.join(", ")
    ))
}

/// Whether an answer is an XML document the gateway wrote (a listing, an upload's
/// initiation or completion, a multi-delete's result, an error), whose keys go into it
/// as they are: every answer of type `application/xml` but an object's own bytes.
pub(crate) fn gateway_xml(operation: &str, headers: &HeaderMap) -> bool {
    let xml = headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/xml"));
    xml && operation != "GetObject" && operation != "HeadObject"
}

/// An XML document with the control characters U+0001 to U+001F and U+007F (which a
/// key may hold, and XML parsers reject or alter as they are) written as character
/// references, as S3 writes them; `None` when it holds none. Bytes, not characters:
/// no byte of a multi-byte UTF-8 sequence is below 0x80.
pub(crate) fn escape_control_characters(xml: &[u8]) -> Option<Vec<u8>> {
    let control = |b: u8| (0x01..=0x1f).contains(&b) || b == 0x7f;
    if !xml.iter().any(|b| control(*b)) {
        return None;
    }
    let mut out = Vec::with_capacity(xml.len() + 16);
    for byte in xml {
        if control(*byte) {
            out.extend_from_slice(format!("&#x{byte:x};").as_bytes());
        } else {
            out.push(*byte);
        }
    }
    Some(out)
}

/// Gives a Streaming SigV4 request sent without a length (`Transfer-Encoding:
/// chunked`, as Go's HTTP client sends an empty body) the `Content-Length` of the body
/// it declares (`x-amz-decoded-content-length`), which the protocol crate takes as the
/// object's length once it has decoded the chunks. The decoder holds the body to that
/// length and checks every chunk's signature; a request that sends no length at all is
/// still `MissingContentLength`.
pub(crate) fn decoded_length_as_content_length(headers: &mut HeaderMap) {
    let streaming = headers
        .get("x-amz-content-sha256")
        .is_some_and(|v| v.as_bytes().starts_with(b"STREAMING-"));
    if !streaming || headers.contains_key(http::header::CONTENT_LENGTH) {
        return;
    }
    let Some(decoded) = headers.get("x-amz-decoded-content-length").cloned() else { return };
    if decoded.to_str().is_ok_and(|v| v.parse::<u64>().is_ok()) {
        headers.remove(http::header::TRANSFER_ENCODING);
        headers.insert(http::header::CONTENT_LENGTH, decoded);
    }
}

/// Request ids, unique within a gateway's life and unlikely to repeat across
/// gateways: a random start, counted up.
pub(crate) struct RequestIds {
    start: u64,
    issued: AtomicU64,
}

impl RequestIds {
    pub(crate) fn new() -> Self {
        let mut seed = [0u8; 8];
        // Without entropy the ids are still unique within this gateway.
        let _ = getrandom::fill(&mut seed);
        RequestIds { start: u64::from_le_bytes(seed), issued: AtomicU64::new(0) }
    }

    pub(crate) fn next(&self) -> String {
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        format!("{:016X}", self.start.wrapping_add(n))
    }
}

/// Gives `response` the request id S3 gives: in `x-amz-request-id`, and in an error's
/// XML body as `<RequestId>` (a client matches the two).
pub(crate) fn with_request_id(response: &mut s3s::HttpResponse, id: &str) {
    let Ok(value) = HeaderValue::from_str(id) else { return };
    response.headers_mut().insert("x-amz-request-id", value);
    if !response.status().is_client_error() && !response.status().is_server_error() {
        return;
    }
    // An error's XML is whole in memory; a streamed body (none is expected) is left.
    let Some(body) = response.body().bytes() else { return };
    *response.body_mut() = s3s::Body::from(error_with_request_id(body, id));
    response.headers_mut().remove(http::header::CONTENT_LENGTH);
}

/// An S3 error document with `<RequestId>` as its last element; any other body as it
/// was.
fn error_with_request_id(body: Bytes, id: &str) -> Bytes {
    const END: &[u8] = b"</Error>";
    let Some(end) = body.windows(END.len()).rposition(|w| w == END) else { return body };
    if body.windows(b"<RequestId>".len()).any(|w| w == b"<RequestId>") {
        return body;
    }
    let mut with = Vec::with_capacity(body.len() + 2 * id.len() + 24);
    with.extend_from_slice(&body[..end]);
    with.extend_from_slice(format!("<RequestId>{id}</RequestId>").as_bytes());
    with.extend_from_slice(&body[end..]);
    Bytes::from(with)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_presigned_url_lasts_one_second_to_seven_days() {
        for query in ["", "X-Amz-Expires=1", "a=b&X-Amz-Expires=604800&c=d"] {
            assert!(presign_expiry_refused(query).is_none(), "{query}");
        }
        for query in
            ["X-Amz-Expires=0", "X-Amz-Expires=604801", "X-Amz-Expires=-1", "X-Amz-Expires=x"]
        {
            assert!(presign_expiry_refused(query).is_some(), "{query}");
        }
    }

    #[test]
    fn a_request_signed_by_header_and_by_query_is_refused() {
        let signed = headers(&[("authorization", SIGV4)]);
        let presigned = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=k%2F20261128\
                         %2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261128T120921Z\
                         &X-Amz-Expires=1&X-Amz-SignedHeaders=host";
        assert!(two_signatures_refused(&signed, presigned).is_some());
        assert!(two_signatures_refused(&signed, "a=b&X-Amz-Signature=00").is_some());
        assert!(two_signatures_refused(&signed, "X%2DAmz-Credential=k").is_some());
        assert!(two_signatures_refused(&signed, "list-type=2&prefix=X-Amz-Credential").is_none());
        assert!(two_signatures_refused(&HeaderMap::new(), presigned).is_none());
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    const SIGV4: &str = "AWS4-HMAC-SHA256 Credential=k/20261128/us-east-1/s3/aws4_request, \
                         SignedHeaders=date;host, Signature=00";

    #[test]
    fn a_request_signed_with_date_gets_the_same_instant_as_amz_date() {
        // Python's formatdate() with and without usegmt, and another zone.
        for date in [
            "Sat, 28 Nov 2026 12:09:21 GMT",
            "Sat, 28 Nov 2026 12:09:21 -0000",
            "Sat, 28 Nov 2026 13:09:21 +0100",
        ] {
            let mut map = headers(&[("authorization", SIGV4), ("date", date)]);
            date_as_amz_date(&mut map);
            assert_eq!(map["x-amz-date"], "20261128T120921Z", "{date}");
        }
    }

    #[test]
    fn only_a_sigv4_request_without_amz_date_and_with_a_good_date_is_changed() {
        let date = "Sat, 28 Nov 2026 12:09:21 GMT";
        for pairs in [
            vec![("authorization", SIGV4), ("date", date), ("x-amz-date", "20260101T000000Z")],
            vec![("authorization", "AWS key:sig"), ("date", date)],
            vec![("date", date)],
            vec![("authorization", SIGV4), ("date", "yesterday")],
            vec![("authorization", SIGV4)],
        ] {
            let before = headers(&pairs);
            let mut after = before.clone();
            date_as_amz_date(&mut after);
            assert_eq!(after, before, "{pairs:?}");
        }
    }

    #[test]
    fn an_error_names_its_request_id_in_the_header_and_the_body() {
        let error = s3_error!(NoSuchKey, "no key").to_http_response().unwrap();
        let mut response = error;
        with_request_id(&mut response, "0123456789ABCDEF");
        assert_eq!(response.headers()["x-amz-request-id"], "0123456789ABCDEF");
        let body = response.body_mut().take_bytes().unwrap();
        let text = std::str::from_utf8(&body).unwrap();
        assert!(text.ends_with("<RequestId>0123456789ABCDEF</RequestId></Error>"), "{text}");
        assert!(text.contains("<Code>NoSuchKey</Code>"), "{text}");
    }

    #[test]
    fn the_headers_of_features_out_of_scope_are_refused_on_writes() {
        let put = http::Method::PUT;
        for (name, value) in [
            ("x-amz-server-side-encryption", "AES256"),
            ("x-amz-server-side-encryption-customer-algorithm", "AES256"),
            ("x-amz-tagging", "a=b"),
            ("x-amz-object-lock-mode", "GOVERNANCE"),
            ("x-amz-object-lock-legal-hold", "ON"),
            ("x-amz-grant-read", "id=x"),
            ("x-amz-website-redirect-location", "/x"),
            ("x-amz-bucket-object-lock-enabled", "true"),
        ] {
            let map = headers(&[(name, value)]);
            let refused = out_of_scope_refused(&put, &map).expect(name);
            assert_eq!(refused.code().as_str(), "NotImplemented");
            assert!(out_of_scope_refused(&http::Method::GET, &map).is_none(), "{name}");
        }
        let fine = headers(&[
            ("x-amz-acl", "private"),
            ("x-amz-bucket-object-lock-enabled", "False"),
            ("content-type", "text/plain"),
        ]);
        assert!(out_of_scope_refused(&put, &fine).is_none());
    }

    #[test]
    fn a_storage_class_is_standard_or_refused() {
        assert!(storage_class_refused(&HeaderMap::new()).is_none());
        assert!(storage_class_refused(&headers(&[("x-amz-storage-class", "STANDARD")])).is_none());
        for class in ["FOO", "standard", "GLACIER", ""] {
            let refused = storage_class_refused(&headers(&[("x-amz-storage-class", class)]));
            assert_eq!(
                refused.map(|e| e.code().as_str().to_owned()).as_deref(),
                Some("InvalidStorageClass"),
                "{class}"
            );
        }
    }

    #[test]
    fn gateway_xml_has_its_control_characters_escaped() {
        let xml = headers(&[("content-type", "application/xml")]);
        assert!(gateway_xml("ListObjectsV2", &xml));
        assert!(gateway_xml("CreateMultipartUpload", &xml));
        assert!(!gateway_xml("GetObject", &xml), "an object's bytes, stored as XML");
        assert!(!gateway_xml("ListObjectsV2", &headers(&[("content-type", "text/plain")])));
        let xml = "<Key>a\u{1}b\tc\u{7f}é</Key>".as_bytes();
        let escaped = escape_control_characters(xml).unwrap();
        assert_eq!(String::from_utf8(escaped).unwrap(), "<Key>a&#x1;b&#x9;c&#x7f;é</Key>");
        assert!(escape_control_characters(b"<Key>plain</Key>").is_none());
    }

    #[test]
    fn request_ids_differ() {
        let ids = RequestIds::new();
        let (a, b) = (ids.next(), ids.next());
        assert_ne!(a, b);
        assert_eq!(a.len(), 16);
    }
}

//! The S3 operations ([`s3s::S3`]) over the [`Store`]: what each request means, its
//! conditions and its errors. s3s parses the requests, checks their signatures and
//! writes the XML.

use std::time::{Duration, UNIX_EPOCH};

use futures::StreamExt;
use s3s::dto::*;
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use somnus_core::cluster::MetadataError;
use somnus_core::cluster::client::ClientError as CoreError;
use somnus_runtime::client::ClientError;

use crate::multipart::PART_BYTES_MAX;
use crate::record::{Headers, ObjectRecord};
use crate::store::{EtagMatch, Listing, Store, StoreError, WriteConditions};

/// The largest object one PUT stores (S3's limit).
pub const PUT_BYTES_MAX: u64 = 5 << 30;
/// The region buckets report.
pub const REGION: &str = "us-east-1";

pub struct Gateway {
    store: Store,
}

impl Gateway {
    pub fn new(store: Store) -> Gateway {
        Gateway { store }
    }
}

/// A GET's or a HEAD's answer: `fields`, then what the object's record says (its
/// time, ETag, metadata and headers), alike for both; a header the request names in a
/// `response-*` parameter (`response-content-type`, ...) is answered as named.
macro_rules! described {
    ($output:ident, $record:expr, $input:expr, { $($field:ident: $value:expr),* $(,)? }) => {{
        let record: &ObjectRecord = $record;
        let input = $input;
        let headers = &record.headers;
        $output {
            $($field: $value,)*
            accept_ranges: Some("bytes".into()),
            last_modified: Some(timestamp(record.modified_ms)),
            e_tag: Some(etag(record)),
            metadata: metadata(headers),
            // What S3 answers for an object stored without one.
            content_type: match &input.response_content_type {
                Some(named) => named.parse().ok(),
                None => headers.content_type.as_deref().unwrap_or("binary/octet-stream").parse().ok(),
            },
            content_encoding: named_or(&input.response_content_encoding, &headers.content_encoding),
            content_disposition: named_or(
                &input.response_content_disposition,
                &headers.content_disposition,
            ),
            content_language: named_or(&input.response_content_language, &headers.content_language),
            cache_control: named_or(&input.response_cache_control, &headers.cache_control),
            expires: input
                .response_expires
                .clone()
                .or_else(|| headers.expires_s.map(|s| timestamp(s.saturating_mul(1000)))),
            ..Default::default()
        }
    }};
}

/// The header a `response-*` parameter names, else the one stored.
fn named_or(named: &Option<String>, stored: &Option<String>) -> Option<String> {
    named.as_ref().or(stored.as_ref()).cloned()
}

/// The headers a PUT, a copy that replaces them, or an upload gives the object.
macro_rules! stored_headers {
    ($input:ident) => {
        headers(Headers {
            content_type: $input.content_type.map(|t| t.to_string()),
            content_encoding: $input.content_encoding,
            content_disposition: $input.content_disposition,
            content_language: $input.content_language,
            cache_control: $input.cache_control,
            expires_s: $input.expires.as_ref().map(seconds),
            metadata: $input.metadata.unwrap_or_default().into_iter().collect(),
        })
    };
}

/// The S3 error a store error is.
fn s3(error: StoreError) -> S3Error {
    use S3ErrorCode as C;
    let message = error.to_string();
    let code = match &error {
        StoreError::NoSuchBucket(_) => C::NoSuchBucket,
        StoreError::NoSuchKey { .. } => C::NoSuchKey,
        StoreError::BucketExists(_) => C::BucketAlreadyOwnedByYou,
        StoreError::BucketNotEmpty(_) => C::BucketNotEmpty,
        StoreError::BadDigest => C::BadDigest,
        StoreError::ChunkSignature => C::SignatureDoesNotMatch,
        StoreError::IncompleteBody { .. } | StoreError::Body(_) => C::IncompleteBody,
        StoreError::MetadataTooLarge(_) => C::MetadataTooLarge,
        StoreError::KeyTooLong(_) => C::KeyTooLongError,
        StoreError::NoSuchUpload(_) => C::NoSuchUpload,
        StoreError::UploadFinishing(_) => C::OperationAborted,
        StoreError::NoPartsListed => C::MalformedXML,
        StoreError::TooManyPartsListed(_) => C::InvalidArgument,
        StoreError::InvalidPart(_) => C::InvalidPart,
        StoreError::InvalidPartOrder => C::InvalidPartOrder,
        StoreError::EntityTooSmall { .. } => C::EntityTooSmall,
        StoreError::PreconditionFailed(_) => C::PreconditionFailed,
        StoreError::Cluster(ClientError::Refused(CoreError::Metadata(m))) => match m {
            MetadataError::BadName(_) => C::KeyTooLongError,
            MetadataError::TooLarge { .. } => C::EntityTooLarge,
            MetadataError::Full(_) => C::ServiceUnavailable,
            _ => C::InternalError,
        },
        StoreError::Cluster(ClientError::Refused(CoreError::NoSpace { .. }))
        | StoreError::Cluster(ClientError::TimedOut(_)) => C::ServiceUnavailable,
        StoreError::Record { .. } | StoreError::Cluster(_) | StoreError::Entropy(_) => {
            C::InternalError
        }
    };
    S3Error::with_message(code, message)
}

fn timestamp(ms: i64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
}

/// Seconds since the epoch of `t` (HTTP dates have whole seconds).
fn seconds(t: &Timestamp) -> i64 {
    time::OffsetDateTime::from(t.clone()).unix_timestamp()
}

fn etag(record: &ObjectRecord) -> ETag {
    ETag::Strong(record.etag.clone())
}

fn matches(condition: &ETagCondition, record: &ObjectRecord) -> bool {
    match condition {
        ETagCondition::Any => true,
        ETagCondition::ETag(tag) => tag.value() == record.etag,
    }
}

/// RFC 7232's order, as S3 applies it: a failed If-Match or If-Unmodified-Since is
/// 412, a matching If-None-Match or an unmodified If-Modified-Since is 304.
fn check_conditions(
    record: &ObjectRecord,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
) -> S3Result<()> {
    let modified = record.modified_ms.div_euclid(1000);
    match (if_match, if_unmodified_since) {
        (Some(condition), _) if !matches(condition, record) => {
            return Err(s3_error!(PreconditionFailed, "If-Match: the ETag is {:?}", record.etag));
        }
        (None, Some(since)) if modified > seconds(since) => {
            return Err(s3_error!(PreconditionFailed, "modified since If-Unmodified-Since"));
        }
        _ => {}
    }
    match (if_none_match, if_modified_since) {
        (Some(condition), _) if matches(condition, record) => Err(not_modified(record)),
        (None, Some(since)) if modified <= seconds(since) => Err(not_modified(record)),
        _ => Ok(()),
    }
}

/// A conditional write's headers, as the store takes them.
fn write_conditions(
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
) -> WriteConditions {
    let named = |condition: &ETagCondition| match condition {
        ETagCondition::Any => EtagMatch::Any,
        ETagCondition::ETag(tag) => EtagMatch::Etag(tag.value().to_owned()),
    };
    WriteConditions { if_match: if_match.map(named), if_none_match: if_none_match.map(named) }
}

/// 304, with the ETag and Last-Modified a cache needs (RFC 7232 4.1).
fn not_modified(record: &ObjectRecord) -> S3Error {
    let mut error = s3_error!(NotModified);
    let mut headers = hyper::HeaderMap::new();
    if let Ok(value) = format!("\"{}\"", record.etag).parse() {
        headers.insert(hyper::header::ETAG, value);
    }
    let mut http_date = Vec::new();
    if timestamp(record.modified_ms).format(TimestampFormat::HttpDate, &mut http_date).is_ok()
        && let Ok(value) = hyper::header::HeaderValue::from_bytes(&http_date)
    {
        headers.insert(hyper::header::LAST_MODIFIED, value);
    }
    error.set_headers(headers);
    error
}

/// `given`, with the `aws-chunked` of a streamed upload taken out of its
/// Content-Encoding: it says how the request's body was framed, not what the object is.
fn headers(given: Headers) -> Headers {
    let content_encoding = given.content_encoding.and_then(|encoding| {
        let kept: Vec<&str> = encoding
            .split(',')
            .map(str::trim)
            .filter(|token| !token.is_empty() && !token.eq_ignore_ascii_case("aws-chunked"))
            .collect();
        (!kept.is_empty()).then(|| kept.join(", "))
    });
    Headers { content_encoding, ..given }
}

fn metadata(headers: &Headers) -> Option<Metadata> {
    (!headers.metadata.is_empty()).then(|| headers.metadata.clone().into_iter().collect())
}

/// `InvalidDigest` for a Content-MD5 header sent empty (the protocol crate reads it as
/// none sent).
fn empty_content_md5(headers: &hyper::HeaderMap) -> S3Result<()> {
    match headers.get("content-md5") {
        Some(value) if value.as_bytes().trim_ascii().is_empty() => {
            Err(s3_error!(InvalidDigest, "Content-MD5 is empty"))
        }
        _ => Ok(()),
    }
}

/// The MD5 a Content-MD5 header holds (base64 of 16 bytes).
fn content_md5(header: Option<&str>) -> S3Result<Option<[u8; 16]>> {
    let Some(header) = header else { return Ok(None) };
    let bytes = base64_simd::STANDARD
        .decode_to_vec(header.trim())
        .map_err(|_| s3_error!(InvalidDigest, "Content-MD5 is not base64"))?;
    let digest: [u8; 16] =
        bytes.try_into().map_err(|_| s3_error!(InvalidDigest, "Content-MD5 is not 16 bytes"))?;
    Ok(Some(digest))
}

/// A body's length from its Content-Length, at most `max` bytes for `what`.
fn body_length(content_length: Option<i64>, max: u64, what: &str) -> S3Result<u64> {
    let Some(length) = content_length else { return Err(s3_error!(MissingContentLength)) };
    let length =
        u64::try_from(length).map_err(|_| s3_error!(InvalidArgument, "negative length"))?;
    if length > max {
        return Err(s3_error!(EntityTooLarge, "{what} stores 5 GiB at most"));
    }
    Ok(length)
}

/// The inclusive bounds of an `x-amz-copy-source-range` (`bytes=first-last`).
fn parse_copy_range(text: &str) -> S3Result<(u64, u64)> {
    let bad = || {
        s3_error!(InvalidArgument, "x-amz-copy-source-range {text:?}: expected bytes=first-last")
    };
    let (first, last) =
        text.strip_prefix("bytes=").and_then(|r| r.split_once('-')).ok_or_else(bad)?;
    Ok((first.parse().map_err(|_| bad())?, last.parse().map_err(|_| bad())?))
}

fn content_range(start: u64, end: u64, size: u64) -> String {
    format!("bytes {start}-{}/{size}", end - 1)
}

/// The byte range a Range header asks of an object of `size` bytes; `None` if it
/// cannot be satisfied.
fn byte_range(range: Option<&Range>, size: u64) -> Option<(u64, u64)> {
    match range {
        None => Some((0, size)),
        // An empty range (any range of an empty object) cannot be satisfied either.
        Some(range) => range.check(size).ok().filter(|r| r.start < r.end).map(|r| (r.start, r.end)),
    }
}

/// Names in a listing's answer as `encoding-type` asks: `url` percent-encodes them
/// (clients such as boto3 ask for it, and decode `+` as a space).
struct Names(bool);

impl Names {
    fn of(encoding: Option<&EncodingType>) -> Names {
        Names(encoding.is_some_and(|e| e.as_str() == EncodingType::URL))
    }

    fn name(&self, text: &str) -> String {
        if self.0 { crate::sigv4::encode_path(text) } else { text.to_owned() }
    }

    fn maybe(&self, text: Option<String>) -> Option<String> {
        text.map(|t| self.name(&t))
    }
}

/// S3's answer to a listing page's objects.
/// The owner of every bucket and object: the gateway has one user.
fn owner() -> Owner {
    Owner { display_name: Some("somnus".into()), id: Some("somnus".into()) }
}

/// A listing's objects; with their owner where asked (V2's `fetch-owner`; V1 always).
fn contents(listing: &Listing, names: &Names, with_owner: bool) -> Vec<Object> {
    listing
        .keys
        .iter()
        .map(|(key, record)| Object {
            key: Some(names.name(key)),
            owner: with_owner.then(owner),
            size: Some(record.size as i64),
            e_tag: Some(etag(record)),
            last_modified: Some(timestamp(record.modified_ms)),
            storage_class: Some(ObjectStorageClass::from_static(ObjectStorageClass::STANDARD)),
            ..Object::default()
        })
        .collect()
}

fn common_prefixes(listing: &Listing, names: &Names) -> Option<Vec<CommonPrefix>> {
    let prefixes: Vec<CommonPrefix> = listing
        .common_prefixes
        .iter()
        .map(|p| CommonPrefix { prefix: Some(names.name(p)) })
        .collect();
    (!prefixes.is_empty()).then_some(prefixes)
}

/// A continuation token: the listing's last name, hex, so that it reads as opaque.
fn token(after: &str) -> String {
    crate::store::hex(after.as_bytes())
}

fn untoken(token: &str) -> S3Result<String> {
    let bad = || s3_error!(InvalidArgument, "the continuation token is not one this gateway gave");
    // Hex is ASCII: anything else is not a token of ours (and would not slice by byte).
    if !token.is_ascii() || !token.len().is_multiple_of(2) {
        return Err(bad());
    }
    let bytes: Result<Vec<u8>, _> =
        (0..token.len()).step_by(2).map(|i| u8::from_str_radix(&token[i..i + 2], 16)).collect();
    String::from_utf8(bytes.map_err(|_| bad())?).map_err(|_| bad())
}

fn max_keys(max: Option<i32>) -> S3Result<usize> {
    match max {
        None => Ok(1000),
        Some(n) if n < 0 => Err(s3_error!(InvalidArgument, "max-keys must not be negative")),
        Some(n) => Ok((n as usize).min(1000)),
    }
}

#[async_trait::async_trait]
impl S3 for Gateway {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let bucket = &req.input.bucket;
        let constraint = req.input.create_bucket_configuration.as_ref();
        if let Some(region) = constraint.and_then(|c| c.location_constraint.as_ref()) {
            return Err(s3_error!(
                InvalidLocationConstraint,
                "this gateway serves us-east-1 only, named by no constraint, not {:?}",
                region.as_str()
            ));
        }
        // A DNS label neither starts nor ends with a hyphen (the protocol crate
        // checks S3's other rules).
        if bucket.contains(".-") || bucket.contains("-.") {
            return Err(s3_error!(
                InvalidBucketName,
                "{:?}: a hyphen next to a dot is not a DNS name",
                bucket.as_str()
            ));
        }
        match self.store.create_bucket(bucket).await {
            // us-east-1 answers 200 to its owner creating a bucket again.
            Ok(()) | Err(StoreError::BucketExists(_)) => {}
            Err(error) => return Err(s3(error)),
        }
        let output = CreateBucketOutput { location: Some(format!("/{bucket}")) };
        Ok(S3Response::new(output))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        self.store.delete_bucket(&req.input.bucket).await.map_err(s3)?;
        Ok(S3Response::new(DeleteBucketOutput {}))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.store.bucket(&req.input.bucket).await.map_err(s3)?;
        let output = HeadBucketOutput { bucket_region: Some(REGION.into()), ..Default::default() };
        Ok(S3Response::new(output))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.store.bucket(&req.input.bucket).await.map_err(s3)?;
        // us-east-1 is reported as no constraint, as S3 does.
        Ok(S3Response::new(GetBucketLocationOutput { location_constraint: None }))
    }

    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let input = req.input;
        let max = match input.max_buckets {
            None => usize::MAX,
            Some(n) if (1..=10_000).contains(&n) => n as usize,
            Some(n) => return Err(s3_error!(InvalidArgument, "max-buckets {n}: 1 to 10,000")),
        };
        let after = input.continuation_token.as_deref().map(untoken).transpose()?;
        let prefix = input.prefix.clone().unwrap_or_default();
        // In name order, as the cluster lists them.
        let mut buckets: Vec<_> = self.store.buckets().await.map_err(s3)?;
        buckets.retain(|(name, _)| {
            name.starts_with(&prefix) && after.as_ref().is_none_or(|a| name > a)
        });
        let truncated = buckets.len() > max;
        buckets.truncate(max);
        let next = truncated.then(|| buckets.last().map(|(name, _)| token(name))).flatten();
        let buckets = buckets
            .into_iter()
            .map(|(name, record)| Bucket {
                name: Some(name),
                creation_date: Some(timestamp(record.created_ms)),
                bucket_region: Some(REGION.into()),
            })
            .collect();
        let output = ListBucketsOutput {
            buckets: Some(buckets),
            owner: Some(owner()),
            continuation_token: next,
            prefix: input.prefix,
        };
        Ok(S3Response::new(output))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let empty_md5 = empty_content_md5(&req.headers);
        let mut input = req.input;
        let mut body = match input.body.take() {
            Some(body) => body.boxed(),
            None => futures::stream::empty().boxed(),
        };
        // A refusal reads the body first, so that a client still sending it hears it.
        let (length, md5) = match empty_md5.and(self.put_checks(&input).await) {
            Ok(checked) => checked,
            Err(refusal) => {
                crate::store::discard_body(&mut body).await;
                return Err(refusal);
            }
        };
        let headers = stored_headers!(input);
        let conditions = write_conditions(input.if_match.as_ref(), input.if_none_match.as_ref());
        let record = self
            .store
            .put(&input.bucket, &input.key, length, body, headers, md5, &conditions)
            .await
            .map_err(s3)?;
        let output = PutObjectOutput { e_tag: Some(etag(&record)), ..Default::default() };
        Ok(S3Response::new(output))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        let range = input.range;
        let conditions = |record: &ObjectRecord| {
            check_conditions(
                record,
                input.if_match.as_ref(),
                input.if_none_match.as_ref(),
                input.if_modified_since.as_ref(),
                input.if_unmodified_since.as_ref(),
            )
        };
        // Conditions and the range are checked on the record the bytes are read by.
        let mut refused: Option<S3Error> = None;
        let found = self
            .store
            .get(&input.bucket, &input.key, |record| {
                if let Err(error) = conditions(record) {
                    refused = Some(error);
                    return Err(StoreError::Body("refused".into()));
                }
                byte_range(range.as_ref(), record.size).ok_or_else(|| {
                    refused = Some(s3_error!(InvalidRange, "the object has {} bytes", record.size));
                    StoreError::Body("refused".into())
                })
            })
            .await;
        let (record, (start, end), stream) = match found {
            Ok(found) => found,
            Err(error) => return Err(refused.take().unwrap_or_else(|| s3(error))),
        };
        let output = described!(GetObjectOutput, &record, &input, {
            body: Some(StreamingBlob::wrap(stream)),
            content_length: Some((end - start) as i64),
            content_range: range.is_some().then(|| content_range(start, end, record.size)),
        });
        Ok(S3Response::new(output))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = req.input;
        let record = self.store.head(&input.bucket, &input.key).await.map_err(s3)?;
        check_conditions(
            &record,
            input.if_match.as_ref(),
            input.if_none_match.as_ref(),
            input.if_modified_since.as_ref(),
            input.if_unmodified_since.as_ref(),
        )?;
        let (start, end) = byte_range(input.range.as_ref(), record.size)
            .ok_or_else(|| s3_error!(InvalidRange, "the object has {} bytes", record.size))?;
        let output = described!(HeadObjectOutput, &record, &input, {
            content_length: Some((end - start) as i64),
            content_range: input.range.is_some().then(|| content_range(start, end, record.size)),
        });
        // A ranged HEAD is answered 206 by the server ([`crate::serve`]): s3s takes no
        // status from a HEAD's answer.
        Ok(S3Response::new(output))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        self.store.delete(&req.input.bucket, &req.input.key).await.map_err(s3)?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let input = req.input;
        self.store.bucket(&input.bucket).await.map_err(s3)?;
        if input.delete.objects.len() > 1000 {
            return Err(s3_error!(MalformedXML, "a multi-object delete names 1000 keys at most"));
        }
        let quiet = input.delete.quiet.unwrap_or(false);
        let (mut deleted, mut errors) = (Vec::new(), Vec::new());
        for object in input.delete.objects {
            match self.store.delete(&input.bucket, &object.key).await {
                Ok(()) if !quiet => {
                    deleted.push(DeletedObject { key: Some(object.key), ..Default::default() })
                }
                Ok(()) => {}
                Err(error) => {
                    let error = s3(error);
                    errors.push(Error {
                        code: Some(error.code().as_str().to_owned()),
                        key: Some(object.key),
                        message: error.message().map(str::to_owned),
                        version_id: None,
                    });
                }
            }
        }
        let output = DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = req.input;
        let max = max_keys(input.max_keys)?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let after = match &input.continuation_token {
            Some(token) => Some(untoken(token)?),
            None => input.start_after.clone(),
        };
        let listing =
            self.list(&input.bucket, &prefix, input.delimiter.as_deref(), after, max).await?;
        let names = Names::of(input.encoding_type.as_ref());
        let output = ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: Some(names.name(&prefix)),
            max_keys: Some(max as i32),
            key_count: Some((listing.keys.len() + listing.common_prefixes.len()) as i32),
            continuation_token: input.continuation_token,
            is_truncated: Some(listing.truncated),
            next_continuation_token: listing.next_after.as_deref().map(token),
            contents: Some(contents(&listing, &names, input.fetch_owner == Some(true))),
            common_prefixes: common_prefixes(&listing, &names),
            delimiter: names.maybe(input.delimiter.filter(|d| !d.is_empty())),
            encoding_type: input.encoding_type,
            start_after: names.maybe(input.start_after),
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let input = req.input;
        let max = max_keys(input.max_keys)?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let listing = self
            .list(&input.bucket, &prefix, input.delimiter.as_deref(), input.marker.clone(), max)
            .await?;
        // NextMarker only with a delimiter, as S3: without one the last key is the marker.
        let next_marker = if input.delimiter.is_some() {
            listing.next_after.clone().map(|n| n.trim_end_matches(char::MAX).to_owned())
        } else {
            None
        };
        let names = Names::of(input.encoding_type.as_ref());
        let output = ListObjectsOutput {
            name: Some(input.bucket),
            // V1's Prefix is never encoded (clients decode only the others), and its
            // Marker is always there, empty when none was given.
            prefix: Some(prefix),
            marker: Some(names.maybe(input.marker).unwrap_or_default()),
            max_keys: Some(max as i32),
            is_truncated: Some(listing.truncated),
            contents: Some(contents(&listing, &names, true)),
            common_prefixes: common_prefixes(&listing, &names),
            delimiter: names.maybe(input.delimiter.filter(|d| !d.is_empty())),
            next_marker: names.maybe(next_marker),
            encoding_type: input.encoding_type,
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let input = req.input;
        let CopySource::Bucket { bucket: from_bucket, key: from_key, .. } = &input.copy_source
        else {
            return Err(s3_error!(NotImplemented, "copies from access points are not supported"));
        };
        let (source, _, stream) = self
            .store
            .get(from_bucket, from_key, |record| Ok((0, record.size)))
            .await
            .map_err(s3)?;
        check_conditions(
            &source,
            input.copy_source_if_match.as_ref(),
            input.copy_source_if_none_match.as_ref(),
            input.copy_source_if_modified_since.as_ref(),
            input.copy_source_if_unmodified_since.as_ref(),
        )
        .map_err(|e| match e.code() {
            S3ErrorCode::NotModified => s3_error!(PreconditionFailed),
            _ => e,
        })?;
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        let same = from_bucket.as_ref() == input.bucket && from_key.as_ref() == input.key;
        if same && !replace {
            return Err(s3_error!(
                InvalidRequest,
                "copying an object to itself needs a change: use the REPLACE metadata directive"
            ));
        }
        let headers = if replace { stored_headers!(input) } else { source.headers.clone() };
        let record = self
            .store
            .put(
                &input.bucket,
                &input.key,
                source.size,
                stream,
                headers,
                None,
                &crate::store::WriteConditions::default(),
            )
            .await
            .map_err(s3)?;
        let result = CopyObjectResult {
            e_tag: Some(etag(&record)),
            last_modified: Some(timestamp(record.modified_ms)),
            ..Default::default()
        };
        let output = CopyObjectOutput { copy_object_result: Some(result), ..Default::default() };
        Ok(S3Response::new(output))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let input = req.input;
        let headers = stored_headers!(input);
        let upload =
            self.store.create_upload(&input.bucket, &input.key, headers).await.map_err(s3)?;
        let output = CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(upload),
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let empty_md5 = empty_content_md5(&req.headers);
        let mut input = req.input;
        let mut body = match input.body.take() {
            Some(body) => body.boxed(),
            None => futures::stream::empty().boxed(),
        };
        let checked = empty_md5
            .and(body_length(input.content_length, PART_BYTES_MAX, "a part"))
            .and_then(|length| Ok((length, content_md5(input.content_md5.as_deref())?)));
        let (length, md5) = match checked {
            Ok(checked) => checked,
            Err(refusal) => {
                crate::store::discard_body(&mut body).await;
                return Err(refusal);
            }
        };
        let number = u32::try_from(input.part_number).unwrap_or(0);
        let record = self
            .store
            .put_part(&input.bucket, &input.key, &input.upload_id, number, length, body, md5)
            .await
            .map_err(s3)?;
        Ok(S3Response::new(UploadPartOutput { e_tag: Some(etag(&record)), ..Default::default() }))
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let input = req.input;
        let CopySource::Bucket { bucket: from_bucket, key: from_key, .. } = &input.copy_source
        else {
            return Err(s3_error!(NotImplemented, "copies from access points are not supported"));
        };
        let wanted = input.copy_source_range.as_deref().map(parse_copy_range).transpose()?;
        let mut refused = None;
        let (source, (start, end), stream) = self
            .store
            .get(from_bucket, from_key, |record| match wanted {
                None => Ok((0, record.size)),
                Some((first, last)) if first <= last && last < record.size => Ok((first, last + 1)),
                Some(_) => {
                    refused = Some(s3_error!(InvalidRange, "the source has {} bytes", record.size));
                    Err(StoreError::Body("refused".into()))
                }
            })
            .await
            .map_err(|e| refused.take().unwrap_or_else(|| s3(e)))?;
        check_conditions(
            &source,
            input.copy_source_if_match.as_ref(),
            input.copy_source_if_none_match.as_ref(),
            input.copy_source_if_modified_since.as_ref(),
            input.copy_source_if_unmodified_since.as_ref(),
        )
        .map_err(|e| match e.code() {
            S3ErrorCode::NotModified => s3_error!(PreconditionFailed),
            _ => e,
        })?;
        let number = u32::try_from(input.part_number).unwrap_or(0);
        let record = self
            .store
            .put_part(
                &input.bucket,
                &input.key,
                &input.upload_id,
                number,
                end - start,
                stream,
                None,
            )
            .await
            .map_err(s3)?;
        let result = CopyPartResult {
            e_tag: Some(etag(&record)),
            last_modified: Some(timestamp(record.modified_ms)),
            ..Default::default()
        };
        Ok(S3Response::new(UploadPartCopyOutput {
            copy_part_result: Some(result),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let input = req.input;
        let parts = input.multipart_upload.and_then(|m| m.parts).unwrap_or_default();
        let mut listed = Vec::with_capacity(parts.len());
        for part in parts {
            let (Some(number), Some(tag)) = (part.part_number, part.e_tag) else {
                return Err(s3_error!(MalformedXML, "a part needs its number and ETag"));
            };
            listed.push((u32::try_from(number).unwrap_or(0), tag.value().to_owned()));
        }
        // Checked once the completion holds the upload, so that a retried completion
        // is not refused by the object its first attempt made.
        let conditions = write_conditions(input.if_match.as_ref(), input.if_none_match.as_ref());
        let record = self
            .store
            .complete_upload(&input.bucket, &input.key, &input.upload_id, &listed, &conditions)
            .await
            .map_err(s3)?;
        let output = CompleteMultipartUploadOutput {
            location: Some(format!("/{}/{}", input.bucket, input.key)),
            bucket: Some(input.bucket),
            key: Some(input.key),
            e_tag: Some(etag(&record)),
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let input = req.input;
        self.store.abort_upload(&input.bucket, &input.key, &input.upload_id).await.map_err(s3)?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let input = req.input;
        self.store.upload(&input.bucket, &input.key, &input.upload_id).await.map_err(s3)?;
        let max = max_keys(input.max_parts)?;
        let after = input.part_number_marker.map_or(0, |m| u32::try_from(m).unwrap_or(0));
        let (parts, truncated) =
            self.store.parts(&input.bucket, &input.upload_id, after, max).await.map_err(s3)?;
        let next = parts.last().map(|p| p.number as i32);
        let parts = parts
            .into_iter()
            .map(|p| Part {
                part_number: Some(p.number as i32),
                size: Some(p.record.size as i64),
                e_tag: Some(etag(&p.record)),
                last_modified: Some(timestamp(p.record.modified_ms)),
                ..Default::default()
            })
            .collect();
        let output = ListPartsOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            max_parts: Some(max as i32),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: next,
            is_truncated: Some(truncated),
            parts: Some(parts),
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let input = req.input;
        let max = max_keys(input.max_uploads)?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let all = self.store.uploads(&input.bucket).await.map_err(s3)?;
        let page = crate::multipart::page_uploads(
            all,
            &prefix,
            input.delimiter.as_deref(),
            input.key_marker.as_deref().unwrap_or(""),
            input.upload_id_marker.as_deref(),
            max,
        );
        let (next_key, next_id) = match page.next {
            Some((key, id)) => (Some(key), id),
            None => (None, None),
        };
        // With `encoding-type=url`, every key-like field is encoded, as in listings.
        let names = Names::of(input.encoding_type.as_ref());
        let common_prefixes = page
            .common_prefixes
            .into_iter()
            .map(|prefix| CommonPrefix { prefix: Some(names.name(&prefix)) })
            .collect();
        let uploads = page
            .uploads
            .into_iter()
            .map(|(id, u)| MultipartUpload {
                key: Some(names.name(&u.key)),
                upload_id: Some(id),
                initiated: Some(timestamp(u.created_ms)),
                ..Default::default()
            })
            .collect();
        let next_key = names.maybe(next_key);
        let output = ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: names.maybe(input.prefix),
            key_marker: names.maybe(input.key_marker),
            upload_id_marker: input.upload_id_marker,
            delimiter: names.maybe(input.delimiter),
            encoding_type: input.encoding_type,
            max_uploads: Some(max as i32),
            is_truncated: Some(page.truncated),
            next_key_marker: next_key,
            next_upload_id_marker: next_id,
            common_prefixes: Some(common_prefixes),
            uploads: Some(uploads),
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }
}

impl Gateway {
    /// A PUT's length and Content-MD5 (its conditions are the store's to check, with
    /// the bucket, before the body is read).
    async fn put_checks(&self, input: &PutObjectInput) -> S3Result<(u64, Option<[u8; 16]>)> {
        let length = body_length(input.content_length, PUT_BYTES_MAX, "a PUT")?;
        let md5 = content_md5(input.content_md5.as_deref())?;
        Ok((length, md5))
    }

    async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        delimiter: Option<&str>,
        after: Option<String>,
        max: usize,
    ) -> S3Result<Listing> {
        if max == 0 {
            self.store.bucket(bucket).await.map_err(s3)?;
            return Ok(Listing::default());
        }
        self.store.list(bucket, prefix, delimiter, after.as_deref(), max).await.map_err(s3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(etag: &str, modified_s: i64) -> ObjectRecord {
        ObjectRecord {
            etag: etag.into(),
            modified_ms: modified_s * 1000 + 500,
            ..Default::default()
        }
    }

    fn at(s: i64) -> Timestamp {
        timestamp(s * 1000)
    }

    fn tag(t: &str) -> ETagCondition {
        ETagCondition::ETag(ETag::Strong(t.into()))
    }

    #[test]
    fn conditions_follow_rfc_7232() {
        let r = record("abc", 100);
        let code = |result: S3Result<()>| result.err().map(|e| e.code().as_str().to_owned());
        assert_eq!(code(check_conditions(&r, Some(&tag("abc")), None, None, None)), None);
        assert_eq!(
            code(check_conditions(&r, Some(&tag("x")), None, None, None)).as_deref(),
            Some("PreconditionFailed")
        );
        assert_eq!(
            code(check_conditions(&r, None, Some(&tag("abc")), None, None)).as_deref(),
            Some("NotModified")
        );
        assert_eq!(
            code(check_conditions(&r, None, Some(&ETagCondition::Any), None, None)).as_deref(),
            Some("NotModified")
        );
        // Whole seconds: modified at 100.5 s is not modified since 100 s.
        assert_eq!(
            code(check_conditions(&r, None, None, Some(&at(100)), None)).as_deref(),
            Some("NotModified")
        );
        assert_eq!(code(check_conditions(&r, None, None, Some(&at(99)), None)), None);
        assert_eq!(
            code(check_conditions(&r, None, None, None, Some(&at(99)))).as_deref(),
            Some("PreconditionFailed")
        );
        // If-Match wins over If-Unmodified-Since, If-None-Match over If-Modified-Since.
        assert_eq!(code(check_conditions(&r, Some(&tag("abc")), None, None, Some(&at(99)))), None);
        assert_eq!(code(check_conditions(&r, None, Some(&tag("x")), Some(&at(100)), None)), None);
    }

    #[test]
    fn tokens_round_trip_and_foreign_ones_are_refused() -> S3Result<()> {
        for name in ["", "a/b", "ключ", "x\u{10FFFF}"] {
            assert_eq!(untoken(&token(name))?, name);
        }
        assert!(untoken("zz").is_err());
        assert!(untoken("abc").is_err());
        assert!(untoken("ff").is_err(), "not UTF-8");
        assert!(untoken("aéb").is_err(), "not ASCII: refused, not sliced inside a character");
        Ok(())
    }

    #[test]
    fn no_range_of_an_empty_object_is_satisfiable() {
        for header in ["bytes=-5", "bytes=0-", "bytes=0-0"] {
            let range = Range::parse(header).ok();
            assert_eq!(byte_range(range.as_ref(), 0), None, "{header}");
        }
        let suffix = Range::parse("bytes=-5").ok();
        assert_eq!(byte_range(suffix.as_ref(), 3), Some((0, 3)));
        assert_eq!(byte_range(None, 0), Some((0, 0)));
    }

    #[test]
    fn content_md5_is_base64_of_16_bytes() -> S3Result<()> {
        assert_eq!(content_md5(Some("XUFAKrxLKna5cZ2REBfFkg=="))?.map(|d| d[0]), Some(0x5d));
        assert!(content_md5(Some("not base64!")).is_err());
        assert!(content_md5(Some("AAAA")).is_err());
        assert_eq!(content_md5(None)?, None);
        Ok(())
    }
}

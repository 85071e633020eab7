//! S3 operations, pure: request builders, addressing, and response/error parsing.
//!
//! Builders return an unsigned [`crate::Request`] with `Host` set (and `Content-Length` where
//! a body follows); the caller signs it with [`crate::sigv4`] and sends it with [`crate::http`].
//! Parsers take the status, headers and body a driver collected and return typed results;
//! S3's own errors become [`S3Error`], whose `Display` is the one line the CLI prints.
//!
//! Modules: [`endpoint`] (URL, addressing style, name validation), [`range`] (`Range` /
//! `Content-Range`), [`ops`] (Get/Head/Put/Delete/List/CreateBucket/DeleteBucket/ListBuckets),
//! [`multipart`], [`list`] (ListObjectsV2 pages), [`buckets`] (ListBuckets), [`meta`] (object metadata headers), [`error`] (S3 error
//! XML), and a bounded XML reader (1 MiB, 32 levels) shared by the parsers.

pub mod buckets;
pub mod endpoint;
pub mod error;
pub mod list;
pub mod meta;
pub mod multipart;
pub mod ops;
pub mod range;
mod xml;

pub use buckets::{BucketEntry, parse_list_buckets};
pub use endpoint::{
    AddressingStyle, BuildError, Endpoint, EndpointError, Scheme, is_dns_compatible,
    validate_bucket, validate_key,
};
pub use error::{ErrorDocument, ParseError, ResponseError, S3Error, parse_error, parse_error_xml};
pub use list::{ListObjectsV2Page, ObjectEntry, parse_list_objects_v2};
pub use meta::ObjectMeta;
pub use multipart::{
    CompletedPart, CompletedUpload, MAX_PARTS, abort_multipart_upload, complete_multipart_upload,
    create_multipart_upload, parse_complete_multipart_upload, parse_initiate_multipart_upload,
    upload_part,
};
pub use ops::{
    GetOptions, ListOptions, PutOptions, create_bucket, delete_bucket, delete_object, get_object,
    head_object, list_buckets, list_objects_v2, put_object,
};
pub use range::{ByteRange, ContentRange, RangeError};
pub use xml::MAX_XML_BYTES;

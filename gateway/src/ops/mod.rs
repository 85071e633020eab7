//! S3 operations served in directory mode beyond the basic object and bucket calls, one
//! module each: DeleteObjects, ListObjects (v1), conditional requests, stored metadata
//! headers, CopyObject, ListParts, ListMultipartUploads and
//! the `null` versions of an unversioned bucket (ListObjectVersions, `versionId=null`).

pub mod checksums;
pub mod conditions;
pub mod copy;
pub mod delete_objects;
pub mod list_v1;
pub mod meta;
pub mod multipart_list;
pub mod parts;
pub mod signed_chunks;
pub mod versions;

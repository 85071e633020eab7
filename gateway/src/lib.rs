//! `hipobj-gateway` (being written): the S3 server side of hipObject.
#![forbid(unsafe_code)]

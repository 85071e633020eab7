//! `hipobj debug sigv4`: shows exactly how a raw HTTP request is signed (issue 8).
//!
//! When a server answers `SignatureDoesNotMatch`, compare its canonical request and string to
//! sign (MinIO, Ceph and s3s-fs log theirs) with the ones printed here. Everything is computed
//! by `s3_lite::sigv4::Signer`, the signer the client uses: this module only parses the raw
//! request and maps the command-line knobs onto `SigningOptions`.
//!
//! Exit codes: 0 success, 2 malformed input (message on stderr, `{"error": ...}` on stdout),
//! 3 unsupported option or input (`{"unsupported": "why"}` on stdout).

use std::io::{Read, Write};

use s3_lite::Request;
use s3_lite::credentials::Credentials;
use s3_lite::sigv4::{
    AmzDate, PayloadHash, SessionTokenMode, Signer, SigningError, SigningOptions,
    canonical_trailer, canonical_uri, query_pairs,
};
use serde_json::{Map, Value, json};

/// Largest stdin accepted (a request body or chunk held in memory).
pub const MAX_INPUT_LEN: u64 = 64 * 1024 * 1024;
/// Most header lines accepted in the raw request.
pub const MAX_HEADERS: usize = 1000;
/// Presigned lifetime when `--mode query` is given without `--expires`.
pub const DEFAULT_EXPIRES_SECS: u64 = 3600;

/// Where the signature goes.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// `Authorization` header (plus `X-Amz-Date`, `X-Amz-Content-Sha256`).
    #[default]
    Header,
    /// Presigned URL: `X-Amz-*` query parameters.
    Query,
}

/// How the payload hash is declared when the request has no `x-amz-content-sha256` header.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentSha256 {
    /// Hash the body and add no header.
    Omit,
    /// Hash the body and add `X-Amz-Content-Sha256` (header-mode default; refused in query
    /// mode: a presigned request carries no such header).
    Header,
    /// Sign `UNSIGNED-PAYLOAD` (query-mode default); header mode also adds the header.
    Unsigned,
}

/// Arguments of `hipobj debug sigv4`. The raw request comes on stdin.
#[derive(clap::Args, Debug, Clone)]
pub struct Sigv4Args {
    /// Access key id.
    #[arg(long)]
    pub access_key: String,
    /// Secret access key.
    #[arg(long)]
    pub secret_key: String,
    /// Region of the credential scope (e.g. us-east-1).
    #[arg(long)]
    pub region: String,
    /// Service of the credential scope (s3).
    #[arg(long)]
    pub service: String,
    /// Signing time, YYYYMMDDTHHMMSSZ.
    #[arg(long)]
    pub date: String,
    /// Header (Authorization) or query (presigned URL) signing.
    #[arg(long, value_enum, default_value_t = Mode::Header)]
    pub mode: Mode,
    /// Presigned URL lifetime in seconds, 1..=604800 (query mode; default 3600).
    #[arg(long)]
    pub expires: Option<u64>,
    /// Payload hash declaration when the request has no x-amz-content-sha256 header
    /// (default: header in header mode, unsigned in query mode).
    #[arg(long, value_enum)]
    pub content_sha256: Option<ContentSha256>,
    /// Session token of temporary credentials.
    #[arg(long)]
    pub session_token: Option<String>,
    /// Do not sign the session token (it is still added, after signing).
    #[arg(long, requires = "session_token")]
    pub omit_session_token: bool,
    /// Sign stdin as one aws-chunked chunk, chained on this previous signature.
    #[arg(long, conflicts_with = "trailer_signature")]
    pub chunk_signature: Option<String>,
    /// Sign stdin as trailing headers (`name:value` lines), chained on this previous signature.
    #[arg(long)]
    pub trailer_signature: Option<String>,
}

/// Why the command stops early.
enum Failure {
    /// Exit 2.
    Malformed(String),
    /// Exit 3.
    Unsupported(String),
}

impl From<SigningError> for Failure {
    fn from(e: SigningError) -> Self {
        match e {
            SigningError::Unsupported(why) => Self::Unsupported(why.to_owned()),
            other => Self::Malformed(other.to_string()),
        }
    }
}

/// Runs the subcommand; returns the process exit code (0 ok, 2 malformed input, 3 unsupported).
pub fn run(
    args: &Sigv4Args,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> i32 {
    let result = execute(args, stdin);
    let (code, value) = match result {
        Ok(v) => (0, v),
        Err(Failure::Malformed(msg)) => {
            // Best effort: a closed stderr must not turn a clear exit code into a panic.
            let _ = writeln!(stderr, "hipobj: error: {msg}");
            (2, json!({ "error": msg }))
        }
        Err(Failure::Unsupported(why)) => {
            let _ = writeln!(stderr, "hipobj: error: unsupported: {why}");
            (3, json!({ "unsupported": why }))
        }
    };
    let text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| "{}".to_owned());
    if writeln!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .is_err()
    {
        let _ = writeln!(stderr, "hipobj: error: cannot write to stdout");
        return if code == 0 { 1 } else { code };
    }
    code
}

fn execute(args: &Sigv4Args, stdin: &mut dyn Read) -> Result<Value, Failure> {
    let streaming = args.chunk_signature.is_some() || args.trailer_signature.is_some();
    if args.chunk_signature.is_some() && args.trailer_signature.is_some() {
        return Err(Failure::Malformed(
            "--chunk-signature and --trailer-signature exclude each other".into(),
        ));
    }
    if args.omit_session_token && args.session_token.is_none() {
        return Err(Failure::Malformed(
            "--omit-session-token needs --session-token".into(),
        ));
    }
    if streaming && args.mode == Mode::Query {
        return Err(Failure::Unsupported(
            "chunk and trailer signatures exist only in header mode".into(),
        ));
    }
    if streaming && args.content_sha256.is_some() {
        return Err(Failure::Unsupported(
            "--content-sha256 does not apply to chunk or trailer signing".into(),
        ));
    }
    if args.expires.is_some() && args.mode != Mode::Query {
        return Err(Failure::Unsupported(
            "--expires applies only to --mode query".into(),
        ));
    }
    if args.mode == Mode::Query && args.content_sha256 == Some(ContentSha256::Header) {
        return Err(Failure::Unsupported(
            "--content-sha256 header: a presigned (query) request carries no x-amz-content-sha256 \
             header; it signs UNSIGNED-PAYLOAD (the default) or the body's hash (omit)"
                .into(),
        ));
    }
    let now = AmzDate::parse(&args.date).map_err(|e| Failure::Malformed(format!("--date: {e}")))?;
    let mut creds = Credentials::new(args.access_key.clone(), args.secret_key.clone());
    if let Some(t) = &args.session_token {
        creds = creds.with_session_token(t.clone());
    }
    let signer = Signer::new(creds, args.region.clone(), args.service.clone())?;
    let input = read_input(stdin)?;

    if let Some(prev) = &args.chunk_signature {
        let out = signer.sign_chunk(prev, now, &input)?;
        return Ok(json!({ "string_to_sign": out.string_to_sign, "signature": out.signature }));
    }
    if let Some(prev) = &args.trailer_signature {
        let text = String::from_utf8(input)
            .map_err(|_| Failure::Malformed("trailer text is not UTF-8".into()))?;
        let out = signer.sign_trailer(prev, now, &canonical_trailer(&text)?)?;
        return Ok(json!({ "string_to_sign": out.string_to_sign, "signature": out.signature }));
    }

    let (mut req, body) = parse_raw_request(&input)?;
    let declared = req
        .header("x-amz-content-sha256")
        .map(|v| v.trim().to_owned());
    let choice = args.content_sha256.unwrap_or(match args.mode {
        Mode::Header => ContentSha256::Header,
        Mode::Query => ContentSha256::Unsigned,
    });
    let payload = match (&declared, choice) {
        (Some(d), _) => PayloadHash::parse(d)?,
        (None, ContentSha256::Unsigned) => PayloadHash::Unsigned,
        (None, ContentSha256::Omit | ContentSha256::Header) => PayloadHash::of_body(body),
    };
    // Only header signing adds the header; a presigned request never does.
    let add_header =
        declared.is_none() && args.mode == Mode::Header && choice != ContentSha256::Omit;
    let token_mode = if args.omit_session_token {
        SessionTokenMode::AppendedUnsigned
    } else {
        SessionTokenMode::Signed
    };
    let options = SigningOptions::default()
        .with_content_sha256_header(add_header)
        .with_session_token(token_mode);

    let mut obj = Map::new();
    let (output, signed) = match args.mode {
        Mode::Header => {
            let out = signer.sign_headers_with(&mut req, &payload, &options, now)?;
            (out, req)
        }
        Mode::Query => {
            let p = signer.presign_with(
                &req,
                &payload,
                &options,
                args.expires.unwrap_or(DEFAULT_EXPIRES_SECS),
                now,
            )?;
            (p.output, p.request)
        }
    };
    obj.insert("canonical_request".into(), output.canonical_request.into());
    obj.insert("string_to_sign".into(), output.string_to_sign.into());
    obj.insert("signature".into(), output.signature.into());
    if let Some(a) = output.authorization {
        obj.insert("authorization".into(), a.into());
    }
    obj.insert("signed_request".into(), render_head(&signed)?.into());
    Ok(Value::Object(obj))
}

fn read_input(stdin: &mut dyn Read) -> Result<Vec<u8>, Failure> {
    let mut input = Vec::new();
    stdin
        .take(MAX_INPUT_LEN + 1)
        .read_to_end(&mut input)
        .map_err(|e| Failure::Malformed(format!("cannot read stdin: {e}")))?;
    if input.len() as u64 > MAX_INPUT_LEN {
        return Err(Failure::Malformed(format!(
            "stdin is larger than {MAX_INPUT_LEN} bytes"
        )));
    }
    Ok(input)
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Splits `input` into lines (LF, with an optional CR before it) up to the first empty line;
/// returns the head lines and the body (everything after the empty line, bytes as given).
fn split_head(input: &[u8]) -> (Vec<&[u8]>, &[u8]) {
    let mut lines = Vec::new();
    let mut rest = input;
    loop {
        let (line, next, ended) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (
                rest.get(..i).unwrap_or(&[]),
                rest.get(i + 1..).unwrap_or(&[]),
                false,
            ),
            None => (rest, &[][..], true),
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        rest = next;
        if line.is_empty() {
            // Blank lines before the request line are tolerated (RFC 9112 §2.2).
            if lines.is_empty() && !ended {
                continue;
            }
            return (lines, rest);
        }
        lines.push(line);
        if ended {
            return (lines, &[]);
        }
    }
}

/// Parses `METHOD SP target SP HTTP/1.1`, headers (with obs-fold continuations), body to EOF.
fn parse_raw_request(input: &[u8]) -> Result<(Request, &[u8]), Failure> {
    let bad = |m: &str| Failure::Malformed(m.to_owned());
    let (lines, body) = split_head(input);
    let mut lines = lines.into_iter();
    let first = lines
        .next()
        .ok_or_else(|| bad("stdin holds no request line"))?;
    let first = std::str::from_utf8(first).map_err(|_| bad("request line is not UTF-8"))?;
    let (Some(a), Some(b)) = (first.find(' '), first.rfind(' ')) else {
        return Err(bad(
            "request line must be `METHOD SP request-target SP HTTP/1.1`",
        ));
    };
    let (method, target, version) = (
        first.get(..a).unwrap_or(""),
        first.get(a + 1..b).unwrap_or(""),
        first.get(b + 1..).unwrap_or(""),
    );
    if a == b || target.is_empty() {
        return Err(bad(
            "request line must be `METHOD SP request-target SP HTTP/1.1`",
        ));
    }
    if !is_token(method) {
        return Err(bad("method is not an HTTP token"));
    }
    match version {
        "HTTP/1.1" | "HTTP/1.0" => {}
        v if v.starts_with("HTTP/") => {
            return Err(Failure::Unsupported(format!("HTTP version {v:?}")));
        }
        _ => return Err(bad("request line does not end in HTTP/1.1")),
    }
    if target == "*" || target.starts_with("http://") || target.starts_with("https://") {
        return Err(Failure::Unsupported(
            "only origin-form request targets (/path?query)".into(),
        ));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let path = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    };
    let mut req = Request::new(method, path);
    req.query = query.to_owned();

    for line in lines {
        let line = std::str::from_utf8(line).map_err(|_| bad("header line is not UTF-8"))?;
        if line.starts_with([' ', '\t']) {
            let (_, value) = req
                .headers
                .last_mut()
                .ok_or_else(|| bad("continuation line before any header"))?;
            value.push(' ');
            value.push_str(line.trim_matches([' ', '\t']));
            continue;
        }
        if req.headers.len() >= MAX_HEADERS {
            return Err(Failure::Malformed(format!(
                "more than {MAX_HEADERS} headers"
            )));
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| bad("header line has no ':'"))?;
        if !is_token(name) {
            return Err(Failure::Malformed(format!(
                "header name {name:?} is not an HTTP token"
            )));
        }
        req.add_header(name, value.trim_matches([' ', '\t']));
    }
    Ok((req, body))
}

/// The request target as it would go on the wire: as given when it is plain visible ASCII,
/// otherwise with the path in canonical (encoded-once) form and each query piece re-encoded.
fn wire_target(req: &Request) -> Result<String, Failure> {
    let visible = |s: &str| s.bytes().all(|b| (0x21..=0x7e).contains(&b));
    if visible(&req.path) && visible(&req.query) {
        return Ok(req.target());
    }
    let mut target = canonical_uri(&req.path)?;
    let pairs = query_pairs(&req.query)?;
    for (i, (k, v)) in pairs.iter().enumerate() {
        target.push(if i == 0 { '?' } else { '&' });
        target.push_str(k);
        if !v.is_empty() {
            target.push('=');
            target.push_str(v);
        }
    }
    Ok(target)
}

/// The signed request head (request line, headers, blank line); the body is unchanged.
fn render_head(req: &Request) -> Result<String, Failure> {
    let mut out = format!("{} {} HTTP/1.1\r\n", req.method, wire_target(req)?);
    for (n, v) in &req.headers {
        out.push_str(n);
        out.push_str(": ");
        out.push_str(v);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    Ok(out)
}

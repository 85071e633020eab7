//! Credentials, region and endpoint, resolved the way AWS users expect.
//!
//! Precedence, highest first: explicit values (CLI flags) > environment > shared profile files.
//! One AWS-CLI rule refines it: an explicitly chosen profile (`--profile`) beats environment
//! credentials, since the user named it on purpose.
//!
//! - Environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
//!   `AWS_PROFILE` (default `default`), `AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`,
//!   `AWS_REGION` / `AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`,
//!   `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS`, `AWS_CA_BUNDLE`.
//! - `~/.aws/credentials`: sections are bare profile names (`[dev]`).
//! - `~/.aws/config`: `[default]` or `[profile dev]` (a bare `[dev]` is ignored there, as the
//!   AWS CLI does); keys `region`, `endpoint_url`, `services` (pointing at a `[services x]`
//!   section with an `s3 =` block holding `endpoint_url`), `ca_bundle`, and credentials as a
//!   fallback.
//!
//! Environment lookups go through the [`Environment`] trait so tests never touch the real
//! process environment; files are read from explicit paths (no sockets, no clock).

mod error;
mod ini;

use std::path::{Path, PathBuf};

pub use error::CredentialsError;
pub use ini::MAX_FILE_LEN;

/// An access key pair, optionally with a session token (temporary credentials).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Access key id (`AKIA...`): not secret, appears in every `Authorization` header.
    pub access_key_id: String,
    /// Secret access key: never printed.
    pub secret_access_key: String,
    /// Session token of temporary credentials: never printed.
    pub session_token: Option<String>,
}

impl Credentials {
    /// Static credentials without a session token.
    pub fn new(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        Self {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: None,
        }
    }

    /// Adds a session token.
    pub fn with_session_token(mut self, token: impl Into<String>) -> Self {
        self.session_token = Some(token.into());
        self
    }
}

/// Redacts the secret and the token, so credentials can sit in structs that derive `Debug`.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Source of environment variables. Implemented for closures, so tests pass a map lookup.
pub trait Environment {
    /// The variable's value; `None` when unset. Empty values are treated as unset by callers.
    fn var(&self, name: &str) -> Option<String>;
}

impl<F: Fn(&str) -> Option<String>> Environment for F {
    fn var(&self, name: &str) -> Option<String> {
        self(name)
    }
}

/// The real process environment (for the CLI; tests use a closure).
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnvironment;

impl Environment for ProcessEnvironment {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

/// Explicit settings (command-line flags). `None` defers to the environment and files.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--access-key`.
    pub access_key_id: Option<String>,
    /// `--secret-key`.
    pub secret_access_key: Option<String>,
    /// `--session-token`.
    pub session_token: Option<String>,
    /// `--profile`.
    pub profile: Option<String>,
    /// `--region`.
    pub region: Option<String>,
    /// `--endpoint-url`.
    pub endpoint_url: Option<String>,
}

impl std::fmt::Debug for Overrides {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overrides")
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .field("profile", &self.profile)
            .field("region", &self.region)
            .field("endpoint_url", &self.endpoint_url)
            .finish()
    }
}

/// Where the credentials came from (for `--debug` output and error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CredentialsSource {
    /// Command-line flags.
    Explicit,
    /// `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`.
    Environment,
    /// A profile in this shared file.
    Profile(PathBuf),
}

/// Region used when nothing configures one (S3's global default).
pub const DEFAULT_REGION: &str = "us-east-1";

/// Everything needed to talk to an S3 endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResolvedConfig {
    /// The identity.
    pub credentials: Credentials,
    /// Where [`ResolvedConfig::credentials`] came from.
    pub credentials_source: CredentialsSource,
    /// Region; [`DEFAULT_REGION`] when nothing set one.
    pub region: String,
    /// Custom endpoint (`http://127.0.0.1:9000`), `None` for AWS.
    pub endpoint_url: Option<String>,
    /// The profile name that was consulted.
    pub profile: String,
    /// PEM bundle of CA certificates to trust for `https://` endpoints: `AWS_CA_BUNDLE`, else
    /// the profile's `ca_bundle` (as the AWS CLI and SDKs read them; `~/` expanded); `None`:
    /// the built-in roots.
    pub ca_bundle: Option<PathBuf>,
}

fn non_empty(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.trim().is_empty())
}

fn expand_home(path: &str, home: Option<&str>) -> Option<PathBuf> {
    match path.strip_prefix("~/") {
        Some(rest) => home.map(|h| Path::new(h).join(rest)),
        None if path == "~" => home.map(PathBuf::from),
        None => Some(PathBuf::from(path)),
    }
}

/// One profile's merged keys from one file, with the file's path.
struct ProfileData {
    path: PathBuf,
    section: ini::Section,
}

impl ProfileData {
    fn get(&self, key: &str) -> Option<&ini::Value> {
        self.section.get(key).filter(|v| !v.value.is_empty())
    }
}

/// The profile name a config-file section denotes: `default`, or `x` for `profile x`.
fn config_profile_name(section: &str) -> Option<&str> {
    if section == "default" {
        return Some("default");
    }
    let rest = section.strip_prefix("profile")?;
    rest.starts_with([' ', '\t']).then(|| rest.trim())
}

fn profile_in(
    file: &ini::IniFile,
    path: &Path,
    profile: &str,
    is_config: bool,
) -> Option<ProfileData> {
    let mut found: Option<ini::Section> = None;
    for (name, s) in &file.sections {
        let hit = if is_config {
            config_profile_name(name) == Some(profile)
        } else {
            name == profile
        };
        if hit {
            found
                .get_or_insert_with(Default::default)
                .entries
                .extend(s.entries.iter().cloned());
        }
    }
    found.map(|section| ProfileData {
        path: path.to_path_buf(),
        section,
    })
}

fn profile_credentials(
    p: &ProfileData,
    profile: &str,
) -> Result<Option<Credentials>, CredentialsError> {
    const AK: &str = "aws_access_key_id";
    const SK: &str = "aws_secret_access_key";
    match (p.get(AK), p.get(SK)) {
        (Some(a), Some(s)) => {
            let creds = Credentials::new(a.value.clone(), s.value.clone());
            Ok(Some(match p.get("aws_session_token") {
                Some(t) => creds.with_session_token(t.value.clone()),
                None => creds,
            }))
        }
        (None, None) => Ok(None),
        (a, s) => {
            let (present, missing, line) = match (a, s) {
                (Some(a), _) => (AK, SK, a.line),
                (_, Some(s)) => (SK, AK, s.line),
                _ => (AK, SK, 0),
            };
            Err(CredentialsError::IncompleteProfile {
                path: p.path.clone(),
                line,
                profile: profile.to_owned(),
                present,
                missing,
            })
        }
    }
}

/// Resolves credentials, region and endpoint. See the module documentation for precedence.
pub fn resolve(
    overrides: &Overrides,
    env: &dyn Environment,
) -> Result<ResolvedConfig, CredentialsError> {
    let var = |n: &str| non_empty(env.var(n));
    let home = var("HOME").or_else(|| var("USERPROFILE"));
    let env_profile = var("AWS_PROFILE");
    let profile_explicit = overrides.profile.is_some() || env_profile.is_some();
    let profile = non_empty(overrides.profile.clone())
        .or(env_profile)
        .unwrap_or_else(|| "default".to_owned());

    let creds_path = match var("AWS_SHARED_CREDENTIALS_FILE") {
        Some(p) => expand_home(&p, home.as_deref()),
        None => home
            .as_deref()
            .map(|h| Path::new(h).join(".aws").join("credentials")),
    };
    let config_path = match var("AWS_CONFIG_FILE") {
        Some(p) => expand_home(&p, home.as_deref()),
        None => home
            .as_deref()
            .map(|h| Path::new(h).join(".aws").join("config")),
    };
    let load = |p: &Option<PathBuf>| -> Result<Option<(PathBuf, ini::IniFile)>, CredentialsError> {
        match p {
            Some(p) => Ok(ini::load(p)?.map(|f| (p.clone(), f))),
            None => Ok(None),
        }
    };
    let creds_file = load(&creds_path)?;
    let config_file = load(&config_path)?;
    let cred_profile = creds_file
        .as_ref()
        .and_then(|(p, f)| profile_in(f, p, &profile, false));
    let conf_profile = config_file
        .as_ref()
        .and_then(|(p, f)| profile_in(f, p, &profile, true));

    let from_profile = || -> Result<Option<(Credentials, CredentialsSource)>, CredentialsError> {
        for p in [&cred_profile, &conf_profile].into_iter().flatten() {
            if let Some(c) = profile_credentials(p, &profile)? {
                return Ok(Some((c, CredentialsSource::Profile(p.path.clone()))));
            }
        }
        if profile_explicit && cred_profile.is_none() && conf_profile.is_none() {
            return Err(CredentialsError::ProfileNotFound {
                profile: profile.clone(),
                looked_in: [&creds_path, &config_path]
                    .into_iter()
                    .flatten()
                    .cloned()
                    .collect(),
            });
        }
        Ok(None)
    };
    let from_env = || -> Result<Option<(Credentials, CredentialsSource)>, CredentialsError> {
        match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
            (Some(a), Some(s)) => {
                let c = Credentials::new(a, s);
                let c = match var("AWS_SESSION_TOKEN") {
                    Some(t) => c.with_session_token(t),
                    None => c,
                };
                Ok(Some((c, CredentialsSource::Environment)))
            }
            (Some(_), None) => Err(CredentialsError::IncompleteEnvironment {
                present: "AWS_ACCESS_KEY_ID",
                missing: "AWS_SECRET_ACCESS_KEY",
            }),
            (None, Some(_)) => Err(CredentialsError::IncompleteEnvironment {
                present: "AWS_SECRET_ACCESS_KEY",
                missing: "AWS_ACCESS_KEY_ID",
            }),
            (None, None) => Ok(None),
        }
    };

    let explicit = match (
        non_empty(overrides.access_key_id.clone()),
        non_empty(overrides.secret_access_key.clone()),
    ) {
        (Some(a), Some(s)) => {
            let c = Credentials::new(a, s);
            let c = match non_empty(overrides.session_token.clone()) {
                Some(t) => c.with_session_token(t),
                None => c,
            };
            Some((c, CredentialsSource::Explicit))
        }
        (Some(_), None) => {
            return Err(CredentialsError::IncompleteExplicit {
                missing: "secret key",
            });
        }
        (None, Some(_)) => {
            return Err(CredentialsError::IncompleteExplicit {
                missing: "access key",
            });
        }
        (None, None) => None,
    };
    let found = match explicit {
        Some(c) => Some(c),
        None if overrides.profile.is_some() => match from_profile()? {
            Some(c) => Some(c),
            None => from_env()?,
        },
        None => match from_env()? {
            Some(c) => Some(c),
            None => from_profile()?,
        },
    };
    let Some((credentials, credentials_source)) = found else {
        // Explicit keys are not listed: their spelling is the caller's (flags, a C config).
        let mut looked_at = vec!["AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY".to_owned()];
        for p in [&creds_path, &config_path].into_iter().flatten() {
            looked_at.push(format!("profile {profile:?} in {}", p.display()));
        }
        return Err(CredentialsError::NoCredentials { looked_at });
    };

    let conf_value = |key: &str| {
        conf_profile
            .as_ref()
            .and_then(|p| p.get(key))
            .map(|v| v.value.clone())
    };
    let region = non_empty(overrides.region.clone())
        .or_else(|| var("AWS_REGION"))
        .or_else(|| var("AWS_DEFAULT_REGION"))
        .or_else(|| conf_value("region"))
        .unwrap_or_else(|| DEFAULT_REGION.to_owned());

    let ignore_configured = var("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
        .or_else(|| conf_value("ignore_configured_endpoint_urls"))
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let services_endpoint = || {
        let name = conf_value("services")?;
        let (_, f) = config_file.as_ref()?;
        let services = f.section(&format!("services {name}"))?;
        services
            .get("s3.endpoint_url")
            .map(|v| v.value.clone())
            .filter(|v| !v.is_empty())
    };
    let endpoint_url = non_empty(overrides.endpoint_url.clone()).or_else(|| {
        if ignore_configured {
            return None;
        }
        var("AWS_ENDPOINT_URL_S3")
            .or_else(|| var("AWS_ENDPOINT_URL"))
            .or_else(services_endpoint)
            .or_else(|| conf_value("endpoint_url"))
    });

    let ca_bundle = var("AWS_CA_BUNDLE")
        .or_else(|| conf_value("ca_bundle"))
        .and_then(|p| expand_home(&p, home.as_deref()));

    Ok(ResolvedConfig {
        credentials,
        credentials_source,
        region,
        endpoint_url,
        profile,
        ca_bundle,
    })
}

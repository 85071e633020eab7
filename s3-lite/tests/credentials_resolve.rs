//! Credential, region and endpoint resolution against temp-dir profile files and a fake
//! environment (the real process environment is never read).

use std::collections::HashMap;
use std::path::PathBuf;

use s3_lite::credentials::{
    CredentialsError, CredentialsSource, Overrides, ResolvedConfig, resolve,
};

struct Fixture {
    dir: tempfile::TempDir,
    env: HashMap<String, String>,
}

impl Fixture {
    /// A fake home with optional `~/.aws/credentials` and `~/.aws/config`.
    fn new(credentials: Option<&str>, config: Option<&str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let aws = dir.path().join(".aws");
        std::fs::create_dir_all(&aws).unwrap();
        if let Some(c) = credentials {
            std::fs::write(aws.join("credentials"), c).unwrap();
        }
        if let Some(c) = config {
            std::fs::write(aws.join("config"), c).unwrap();
        }
        let mut env = HashMap::new();
        env.insert("HOME".to_owned(), dir.path().display().to_string());
        Self { dir, env }
    }

    fn set(mut self, k: &str, v: &str) -> Self {
        self.env.insert(k.to_owned(), v.to_owned());
        self
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(".aws").join(name)
    }

    fn resolve(&self, o: &Overrides) -> Result<ResolvedConfig, CredentialsError> {
        let env = |k: &str| self.env.get(k).cloned();
        resolve(o, &env)
    }
}

const CREDS: &str = "\
# comment
[default]
aws_access_key_id = AKDEFAULT
aws_secret_access_key = secret/with+chars#and;semicolons

; another comment
[dev]
aws_access_key_id=AKDEV
aws_secret_access_key=SKDEV
aws_session_token = TOKDEV
";

const CONFIG: &str = "\
[default]
region = eu-west-1

[profile dev]
region = ap-south-1
services = local

[dev]
region = ignored-bare-section

[services local]
s3 =
  endpoint_url = http://127.0.0.1:9000

[profile cfgonly]
aws_access_key_id = AKCFG
aws_secret_access_key = SKCFG
endpoint_url = http://global:1
";

#[test]
fn default_profile_from_files() {
    let f = Fixture::new(Some(CREDS), Some(CONFIG));
    let r = f.resolve(&Overrides::default()).unwrap();
    assert_eq!(r.credentials.access_key_id, "AKDEFAULT");
    assert_eq!(
        r.credentials.secret_access_key,
        "secret/with+chars#and;semicolons"
    );
    assert_eq!(r.credentials.session_token, None);
    assert_eq!(
        r.credentials_source,
        CredentialsSource::Profile(f.path("credentials"))
    );
    assert_eq!(r.region, "eu-west-1");
    assert_eq!(r.endpoint_url, None);
    assert_eq!(r.profile, "default");
}

#[test]
fn named_profile_uses_profile_prefix_in_config_and_services_endpoint() {
    let f = Fixture::new(Some(CREDS), Some(CONFIG)).set("AWS_PROFILE", "dev");
    let r = f.resolve(&Overrides::default()).unwrap();
    assert_eq!(r.credentials.access_key_id, "AKDEV");
    assert_eq!(r.credentials.session_token.as_deref(), Some("TOKDEV"));
    assert_eq!(r.region, "ap-south-1");
    assert_eq!(r.endpoint_url.as_deref(), Some("http://127.0.0.1:9000"));
    // Credentials may live in the config file too.
    let r = f
        .resolve(&Overrides {
            profile: Some("cfgonly".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(r.credentials.access_key_id, "AKCFG");
    assert_eq!(
        r.credentials_source,
        CredentialsSource::Profile(f.path("config"))
    );
    assert_eq!(r.endpoint_url.as_deref(), Some("http://global:1"));
    assert_eq!(r.region, "us-east-1");
}

#[test]
fn precedence_explicit_over_env_over_profile() {
    let f = Fixture::new(Some(CREDS), Some(CONFIG))
        .set("AWS_ACCESS_KEY_ID", "AKENV")
        .set("AWS_SECRET_ACCESS_KEY", "SKENV")
        .set("AWS_SESSION_TOKEN", "TOKENV")
        .set("AWS_DEFAULT_REGION", "us-west-1")
        .set("AWS_ENDPOINT_URL", "http://env-global");
    let r = f.resolve(&Overrides::default()).unwrap();
    assert_eq!(r.credentials.access_key_id, "AKENV");
    assert_eq!(r.credentials.session_token.as_deref(), Some("TOKENV"));
    assert_eq!(r.credentials_source, CredentialsSource::Environment);
    assert_eq!(r.region, "us-west-1");
    assert_eq!(r.endpoint_url.as_deref(), Some("http://env-global"));

    let f = f
        .set("AWS_REGION", "us-west-2")
        .set("AWS_ENDPOINT_URL_S3", "http://env-s3");
    let r = f.resolve(&Overrides::default()).unwrap();
    assert_eq!(r.region, "us-west-2");
    assert_eq!(r.endpoint_url.as_deref(), Some("http://env-s3"));

    let o = Overrides {
        access_key_id: Some("AKFLAG".into()),
        secret_access_key: Some("SKFLAG".into()),
        region: Some("flag-region".into()),
        endpoint_url: Some("http://flag".into()),
        ..Default::default()
    };
    let r = f.resolve(&o).unwrap();
    assert_eq!(r.credentials.access_key_id, "AKFLAG");
    assert_eq!(r.credentials.session_token, None);
    assert_eq!(r.credentials_source, CredentialsSource::Explicit);
    assert_eq!(
        (r.region.as_str(), r.endpoint_url.as_deref()),
        ("flag-region", Some("http://flag"))
    );

    // An explicit --profile beats environment credentials (AWS CLI behaviour).
    let r = f
        .resolve(&Overrides {
            profile: Some("dev".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(r.credentials.access_key_id, "AKDEV");

    let f = f.set("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true");
    assert_eq!(f.resolve(&Overrides::default()).unwrap().endpoint_url, None);
}

#[test]
fn file_locations_from_environment() {
    let f = Fixture::new(None, None);
    let other = f.dir.path().join("elsewhere");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(
        other.join("c"),
        "[default]\naws_access_key_id=A\naws_secret_access_key=S\n",
    )
    .unwrap();
    std::fs::write(other.join("k"), "[default]\nregion=sa-east-1\n").unwrap();
    let f = f
        .set(
            "AWS_SHARED_CREDENTIALS_FILE",
            &other.join("c").display().to_string(),
        )
        .set("AWS_CONFIG_FILE", &other.join("k").display().to_string());
    let r = f.resolve(&Overrides::default()).unwrap();
    assert_eq!(r.credentials.access_key_id, "A");
    assert_eq!(r.region, "sa-east-1");
    assert_eq!(
        r.credentials_source,
        CredentialsSource::Profile(other.join("c"))
    );
}

#[test]
fn broken_files_name_file_and_line() {
    let f = Fixture::new(Some("aws_access_key_id = A\n"), None);
    let p = f.path("credentials");
    assert_eq!(
        f.resolve(&Overrides::default()),
        Err(CredentialsError::Parse {
            path: p.clone(),
            line: 1,
            reason: "key outside of any [section]"
        })
    );
    let f = Fixture::new(Some("[default]\naws_access_key_id = A\n[dev\n"), None);
    assert!(matches!(
        f.resolve(&Overrides::default()),
        Err(CredentialsError::Parse { line: 3, .. })
    ));
    let f = Fixture::new(Some("\n[default]\n\naws_access_key_id = A\n"), None);
    let err = f.resolve(&Overrides::default()).unwrap_err();
    assert_eq!(
        err,
        CredentialsError::IncompleteProfile {
            path: f.path("credentials"),
            line: 4,
            profile: "default".into(),
            present: "aws_access_key_id",
            missing: "aws_secret_access_key",
        }
    );
    assert!(err.to_string().contains("credentials:4"), "{err}");
    let f = Fixture::new(None, Some("[default]\nregion\n"));
    assert!(matches!(
        f.resolve(&Overrides::default()),
        Err(CredentialsError::Parse { line: 2, .. })
    ));
}

#[test]
fn missing_and_partial_credentials() {
    let f = Fixture::new(None, None);
    match f.resolve(&Overrides::default()) {
        Err(CredentialsError::NoCredentials { looked_at }) => {
            assert!(looked_at.iter().any(|l| l.contains("AWS_ACCESS_KEY_ID")));
            assert!(
                looked_at
                    .iter()
                    .any(|l| l.contains(&f.path("credentials").display().to_string()))
            );
        }
        other => panic!("{other:?}"),
    }
    let g = Fixture::new(None, None).set("AWS_ACCESS_KEY_ID", "A");
    assert!(matches!(
        g.resolve(&Overrides::default()),
        Err(CredentialsError::IncompleteEnvironment { .. })
    ));
    let o = Overrides {
        access_key_id: Some("A".into()),
        ..Default::default()
    };
    assert!(matches!(
        f.resolve(&o),
        Err(CredentialsError::IncompleteExplicit { .. })
    ));
    let h = Fixture::new(Some(CREDS), None).set("AWS_PROFILE", "nope");
    assert!(matches!(
        h.resolve(&Overrides::default()),
        Err(CredentialsError::ProfileNotFound { .. })
    ));
    // No HOME at all: nothing to read, a clear NoCredentials.
    let env = |_: &str| None;
    assert!(matches!(
        resolve(&Overrides::default(), &env),
        Err(CredentialsError::NoCredentials { .. })
    ));
}

#[test]
fn debug_output_never_shows_secrets() {
    let f = Fixture::new(Some(CREDS), None).set("AWS_PROFILE", "dev");
    let r = f.resolve(&Overrides::default()).unwrap();
    let shown = format!("{r:?}");
    assert!(shown.contains("AKDEV"));
    assert!(
        !shown.contains("SKDEV") && !shown.contains("TOKDEV"),
        "{shown}"
    );
    let o = Overrides {
        secret_access_key: Some("hunter2".into()),
        ..Default::default()
    };
    assert!(!format!("{o:?}").contains("hunter2"));
}

#[test]
fn oversized_file_is_refused() {
    let f = Fixture::new(None, None);
    let big = "#".repeat(usize::try_from(s3_lite::credentials::MAX_FILE_LEN).unwrap() + 1);
    std::fs::write(f.path("credentials"), big).unwrap();
    assert!(matches!(
        f.resolve(&Overrides::default()),
        Err(CredentialsError::FileTooLarge { .. })
    ));
}

#[test]
fn ca_bundle_from_env_then_profile_with_home_expanded() {
    let config = "[default]\nca_bundle = ~/certs/profile.pem\n[profile other]\nregion = r\n";
    let f = Fixture::new(Some(CREDS), Some(config));
    let home = f.dir.path().to_path_buf();
    let r = f.resolve(&Overrides::default()).unwrap();
    assert_eq!(r.ca_bundle, Some(home.join("certs/profile.pem")));
    let f = f.set("AWS_CA_BUNDLE", "/etc/env.pem");
    let r = f.resolve(&Overrides::default()).unwrap();
    assert_eq!(
        r.ca_bundle,
        Some(PathBuf::from("/etc/env.pem")),
        "the environment wins"
    );
    let f = Fixture::new(Some(CREDS), Some(config));
    let r = f
        .resolve(&Overrides {
            profile: Some("dev".into()),
            ..Overrides::default()
        })
        .unwrap();
    assert_eq!(r.ca_bundle, None, "another profile's bundle is not used");
}

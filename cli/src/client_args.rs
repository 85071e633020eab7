//! The flags of client commands (`put`, `get`, `head`, `ls`, `rm`, `mb`, `rb`, `bench`): where
//! the endpoint is, how to trust it, how to print. They are accepted after the command (`hipobj
//! get s3://b/k --json`) and, as the aws CLI accepts its global options, before it (`hipobj
//! --json get s3://b/k`); `serve`, `topo` and `debug` do not take them.

use std::path::PathBuf;

use clap::Args;

/// Where the endpoint is (every client command, `bench` included).
#[derive(Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointArgs {
    /// S3 endpoint, e.g. http://127.0.0.1:9000 (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, profile).
    #[arg(long)]
    pub endpoint_url: Option<String>,
    /// Region of the signature scope (default: AWS_REGION, AWS_DEFAULT_REGION, profile, us-east-1).
    #[arg(long)]
    pub region: Option<String>,
}

/// How results are printed (every client command, `bench` included).
#[derive(Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputArgs {
    /// Print the result as one JSON object on stdout (docs/cli.md).
    #[arg(long)]
    pub json: bool,
    /// Never draw a progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

/// The flags of the object commands (`put`, `get`, `head`, `ls`, `rm`, `mb`, `rb`).
#[derive(Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientArgs {
    #[command(flatten)]
    pub endpoint: EndpointArgs,
    /// Profile in ~/.aws/credentials and ~/.aws/config (default: AWS_PROFILE, "default").
    #[arg(long)]
    pub profile: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
    /// PEM file of CA certificates to trust for https:// endpoints.
    #[arg(long)]
    pub ca_bundle: Option<PathBuf>,
    /// Accept any TLS certificate (testing only: the server's identity is not checked).
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    /// Bucket addressing: path (/bucket/key), virtual (bucket.host/key) or auto (the default).
    #[arg(long, value_parser = ["auto", "path", "virtual"])]
    pub addressing_style: Option<String>,
}

impl EndpointArgs {
    /// These flags, each taken from `self` when given there, else from `outer`.
    #[must_use]
    pub fn or(&self, outer: &EndpointArgs) -> EndpointArgs {
        EndpointArgs {
            endpoint_url: self.endpoint_url.clone().or(outer.endpoint_url.clone()),
            region: self.region.clone().or(outer.region.clone()),
        }
    }
}

impl OutputArgs {
    /// A flag set in either place is set.
    #[must_use]
    pub fn or(&self, outer: &OutputArgs) -> OutputArgs {
        OutputArgs {
            json: self.json || outer.json,
            no_progress: self.no_progress || outer.no_progress,
        }
    }
}

impl ClientArgs {
    /// The flags given after the command (`self`) completed by those given before it.
    #[must_use]
    pub fn or(&self, outer: &ClientArgs) -> ClientArgs {
        ClientArgs {
            endpoint: self.endpoint.or(&outer.endpoint),
            profile: self.profile.clone().or(outer.profile.clone()),
            output: self.output.or(&outer.output),
            ca_bundle: self.ca_bundle.clone().or(outer.ca_bundle.clone()),
            insecure_skip_tls_verify: self.insecure_skip_tls_verify
                || outer.insecure_skip_tls_verify,
            addressing_style: self
                .addressing_style
                .clone()
                .or(outer.addressing_style.clone()),
        }
    }

    /// Whether no flag was given.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == ClientArgs::default()
    }

    /// Whether a flag only the object commands take was given (`bench` takes the endpoint and
    /// output flags alone).
    #[must_use]
    pub fn has_object_only_flags(&self) -> bool {
        self.profile.is_some()
            || self.ca_bundle.is_some()
            || self.insecure_skip_tls_verify
            || self.addressing_style.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_after_the_command_win_and_switches_add_up() {
        let before = ClientArgs {
            endpoint: EndpointArgs {
                endpoint_url: Some("http://a".into()),
                region: Some("r1".into()),
            },
            output: OutputArgs {
                json: true,
                no_progress: false,
            },
            ..Default::default()
        };
        let after = ClientArgs {
            endpoint: EndpointArgs {
                endpoint_url: Some("http://b".into()),
                region: None,
            },
            addressing_style: Some("path".into()),
            ..Default::default()
        };
        let m = after.or(&before);
        assert_eq!(m.endpoint.endpoint_url.as_deref(), Some("http://b"));
        assert_eq!(m.endpoint.region.as_deref(), Some("r1"));
        assert!(m.output.json && !m.output.no_progress);
        assert_eq!(m.addressing_style.as_deref(), Some("path"));
        assert!(ClientArgs::default().is_empty() && !m.is_empty());
        assert!(m.has_object_only_flags() && !before.has_object_only_flags());
    }
}

//! A local S3 server for the backup-store drills: moto's server (PyPI
//! `moto[server]`, installed by `scripts/setup` in the tools' virtualenv)
//! on a free loopback port. It takes any credentials; the drills use
//! [`S3Server::ACCESS_KEY`] and [`S3Server::SECRET_KEY`].

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::{free_port, tools_dirs, wait_until};

/// A program of the tools' virtualenv (`moto_server`, `barman-cloud-backup`).
pub fn venv_program(name: &str) -> Result<PathBuf> {
    tools_dirs()
        .into_iter()
        .map(|d| d.join("venv/bin").join(name))
        .find(|p| p.is_file())
        .with_context(|| format!("{name} is not in the tools' virtualenv: run scripts/setup"))
}

/// A running S3 server; stopped on drop.
#[derive(Debug)]
pub struct S3Server {
    child: Child,
    port: u16,
}

impl S3Server {
    pub const ACCESS_KEY: &'static str = "walshadow-test";
    pub const SECRET_KEY: &'static str = "walshadow-test-secret";
    pub const REGION: &'static str = "us-east-1";

    pub fn start() -> Result<S3Server> {
        let program = venv_program("moto_server")?;
        let port = free_port()?;
        let child = Command::new(&program)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        let mut server = S3Server { child, port };
        let agent = ureq::Agent::new_with_defaults();
        let url = server.endpoint();
        wait_until(Duration::from_secs(60), "the S3 server to answer", || {
            if let Some(status) = server.child.try_wait()? {
                bail!("moto_server exited: {status}");
            }
            Ok(agent.get(&url).call().is_ok())
        })?;
        Ok(server)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Creates bucket `name` (path-style `PUT /name`).
    pub fn create_bucket(&self, name: &str) -> Result<()> {
        ureq::Agent::new_with_defaults()
            .put(&format!("{}/{name}", self.endpoint()))
            .send_empty()
            .with_context(|| format!("creating bucket {name}"))?;
        Ok(())
    }

    /// Runs a boto3 script given `s3 = boto3.client(…)` for this server and
    /// `args` as `sys.argv[1:]`: signed requests, which the server wants
    /// for all but creating a bucket. Its standard output.
    fn boto3(&self, what: &str, body: &str, args: &[&str]) -> Result<String> {
        let script = format!(
            "import sys, boto3\ns3 = boto3.client('s3', endpoint_url={:?})\n{body}",
            self.endpoint()
        );
        let out = Command::new(venv_program("python")?)
            .arg("-c")
            .arg(script)
            .args(args)
            .envs(self.aws_env())
            .output()?;
        if !out.status.success() {
            bail!("{what}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The keys of `bucket` under `prefix`.
    pub fn keys(&self, bucket: &str, prefix: &str) -> Result<Vec<String>> {
        let body = "for page in s3.get_paginator('list_objects_v2').paginate(Bucket=sys.argv[1], Prefix=sys.argv[2]):\n    \
                    for o in page.get('Contents', []): print(o['Key'])\n";
        let out = self.boto3(
            &format!("listing {bucket}/{prefix}"),
            body,
            &[bucket, prefix],
        )?;
        Ok(out.lines().map(str::to_owned).collect())
    }

    /// Copies every file under `dir` into `bucket` as `<prefix>/<path>`
    /// (a store written on a local path, served as S3 lays it out).
    pub fn upload_dir(&self, bucket: &str, prefix: &str, dir: &std::path::Path) -> Result<()> {
        let body = "import os\nroot, bucket, prefix = sys.argv[1:4]\n\
                    for d, _, files in os.walk(root):\n    for f in files:\n        \
                    p = os.path.join(d, f)\n        \
                    s3.upload_file(p, bucket, prefix + '/' + os.path.relpath(p, root))\n";
        let root = dir.to_str().context("a UTF-8 path")?;
        self.boto3(
            &format!("uploading {} to {bucket}/{prefix}", dir.display()),
            body,
            &[root, bucket, prefix],
        )
        .map(|_| ())
    }

    /// Deletes object `key` of `bucket`.
    pub fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        let body = "s3.delete_object(Bucket=sys.argv[1], Key=sys.argv[2])\n";
        self.boto3(&format!("deleting {bucket}/{key}"), body, &[bucket, key])
            .map(|_| ())
    }

    /// The environment the AWS tools (barman-cloud's boto3) read.
    pub fn aws_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", Self::ACCESS_KEY.to_owned()),
            ("AWS_SECRET_ACCESS_KEY", Self::SECRET_KEY.to_owned()),
            ("AWS_DEFAULT_REGION", Self::REGION.to_owned()),
        ]
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

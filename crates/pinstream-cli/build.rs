//! Sets `PINSTREAM_COMMIT` for `pinstream --version`: the commit this CLI was built from.
//! From a published crate, `.cargo_vcs_info.json` (written by `cargo package`) names it; from
//! a git checkout, `git rev-parse HEAD`; otherwise it is "unknown".
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let commit = packaged_commit(Path::new(&dir))
        .or_else(|| git_commit(&dir))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=PINSTREAM_COMMIT={commit}");
}

/// The commit `cargo package` recorded, with "-dirty" when it packaged uncommitted changes.
fn packaged_commit(dir: &Path) -> Option<String> {
    let info = dir.join(".cargo_vcs_info.json");
    let text = std::fs::read_to_string(&info).ok()?;
    println!("cargo:rerun-if-changed={}", info.display());
    let sha = text.split("\"sha1\"").nth(1)?.split('"').nth(1)?;
    let dirty = text.contains("\"dirty\": true");
    Some(format!(
        "{}{}",
        short(sha),
        if dirty { "-dirty" } else { "" }
    ))
}

/// HEAD of the checkout `dir` is in; rebuilt when HEAD or the branch it names moves.
fn git_commit(dir: &str) -> Option<String> {
    let sha = git(dir, &["rev-parse", "HEAD"])?;
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    watched.extend(git(dir, &["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        let path = git(dir, &["rev-parse", "--git-path", &name])?;
        let path = Path::new(dir).join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    Some(short(&sha).to_string())
}

fn git(dir: &str, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

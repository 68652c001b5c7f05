use super::*;
#[cfg(unix)]
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt, PermissionsExt};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pinstream-out-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn names(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[cfg(unix)]
const NEVER: &(dyn Fn() -> bool + Sync) = &|| false;

#[cfg(unix)] // unix file kinds, modes, links or uids: Windows has none of these (platform.rs)
#[test]
fn a_file_is_replaced_whole_and_keeps_its_mode() {
    let d = dir("replace");
    let f = d.join("out.bin");
    let out = prepare_output(&f).unwrap();
    assert_eq!(out.target, Target::Replace(f.clone()));
    write_bytes(&out, b"first", NEVER).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
    let out = prepare_output(&f).unwrap();
    write_bytes(&out, b"second", NEVER).unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), b"second");
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o640);
    assert_eq!(names(&d), ["out.bin"], "no temporary file left");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_stop_leaves_the_target_as_it_was() {
    let d = dir("stop");
    let f = d.join("out.bin");
    std::fs::write(&f, b"old").unwrap();
    let out = prepare_output(&f).unwrap();
    let e = write_bytes(&out, &[7u8; 1000], &|| true).unwrap_err();
    assert!(matches!(e, IoError::Stopped), "{e}");
    assert_eq!(std::fs::read(&f).unwrap(), b"old");
    assert_eq!(names(&d), ["out.bin"]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[cfg(unix)] // unix file kinds, modes, links or uids: Windows has none of these (platform.rs)
#[test]
fn devices_and_fifos_are_written_through_never_replaced() {
    // /dev/null itself is only ever opened for writing here, never renamed over.
    let out = prepare_output(Path::new("/dev/null")).unwrap();
    assert!(matches!(
        out.target,
        Target::Through {
            kind: "a character device",
            ..
        }
    ));
    write_bytes(&out, b"gone", NEVER).unwrap();
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
    let e = write_bytes(
        &prepare_output(Path::new("/dev/full")).unwrap(),
        b"x",
        NEVER,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("writing /dev/full failed") && e.contains("No space left"),
        "{e}"
    );

    let d = dir("fifo");
    let fifo = d.join("pipe");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("skipped the FIFO half: mkfifo is not available here");
        return;
    }
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let out = prepare_output(&fifo).unwrap();
    assert!(matches!(out.target, Target::Through { kind: "a FIFO", .. }));
    write_bytes(&out, b"through the pipe", NEVER).unwrap();
    assert_eq!(reader.join().unwrap(), b"through the pipe");
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert_eq!(names(&d), ["pipe"]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[cfg(unix)] // unix file kinds, modes, links or uids: Windows has none of these (platform.rs)
#[test]
fn links_write_their_target_or_are_refused() {
    let d = dir("links");
    let (real, link) = (d.join("real.bin"), d.join("link.bin"));
    std::fs::write(&real, b"old").unwrap();
    symlink(&real, &link).unwrap();
    let out = prepare_output(&link).unwrap();
    assert_eq!(
        out.target,
        Target::Replace(std::fs::canonicalize(&real).unwrap())
    );
    write_bytes(&out, b"new", NEVER).unwrap();
    assert_eq!(std::fs::read(&real).unwrap(), b"new");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let dangling = d.join("dangling.bin");
    symlink(d.join("nowhere.bin"), &dangling).unwrap();
    let e = prepare_output(&dangling).unwrap_err().to_string();
    assert!(
        e.contains("does not exist") && e.contains("nowhere.bin itself"),
        "{e}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[cfg(unix)] // unix file kinds, modes, links or uids: Windows has none of these (platform.rs)
#[test]
fn folders_sockets_and_missing_folders_are_refused() {
    let d = dir("refused");
    let e = prepare_output(&d).unwrap_err().to_string();
    assert!(e.contains("is a folder") && e.contains("out.bin"), "{e}");
    let e = prepare_output(&d.join("no/such/out.bin"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not exist"), "{e}");
    let sock = d.join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let e = prepare_output(&sock).unwrap_err().to_string();
    assert!(e.contains("a socket"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn killed_runs_leave_nothing_for_long() {
    let d = dir("stale");
    let f = d.join("out.bin");
    let mut child = if cfg!(windows) {
        let mut c = std::process::Command::new("cmd");
        c.args(["/C", "exit"]);
        c
    } else {
        std::process::Command::new("true")
    }
    .spawn()
    .unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = d.join(format!(".out.bin.pinstream-tmp-{dead}.abcdefgh"));
    let legacy = d.join(format!(".out.bin.pinstream-tmp-{dead}"));
    let live = d.join(format!(
        ".out.bin.pinstream-tmp-{}.abcdefgh",
        std::process::id()
    ));
    let other = d.join(format!(".other.bin.pinstream-tmp-{dead}.abcdefgh"));
    for p in [&stale, &legacy, &live, &other] {
        std::fs::write(p, b"partial").unwrap();
    }
    let out = prepare_output(&f).unwrap();
    let mut removed = out.removed.clone();
    removed.sort();
    let mut want = vec![stale.clone(), legacy.clone()];
    want.sort();
    assert_eq!(removed, want);
    assert!(live.exists() && other.exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[cfg(unix)] // unix file kinds, modes, links or uids: Windows has none of these (platform.rs)
#[test]
fn identities() {
    let d = dir("ids");
    let (a, b) = (d.join("a.bin"), d.join("b.bin"));
    std::fs::write(&a, b"x").unwrap();
    std::fs::hard_link(&a, &b).unwrap();
    assert_eq!(FileIdentity::of(&a), FileIdentity::of(&b), "hard links");
    let new = d.join("new.bin");
    let dotted = d.join(".").join("new.bin");
    assert_eq!(FileIdentity::of(&new), FileIdentity::of(&dotted));
    assert_ne!(FileIdentity::of(&a), FileIdentity::of(&new));
    assert_eq!(
        FileIdentity::of(Path::new("/dev/stdout")),
        FileIdentity::of(Path::new("/proc/self/fd/1"))
    );
    assert!(FileIdentity::of(Path::new("/dev/null")).is_char_device());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn temporary_names() {
    assert_eq!(
        stale_pid(".o.pinstream-tmp-42.ab12cd", ".o.pinstream-tmp-"),
        Some(42)
    );
    assert_eq!(
        stale_pid(".o.pinstream-tmp-42", ".o.pinstream-tmp-"),
        Some(42)
    );
    assert_eq!(stale_pid(".o.pinstream-tmp-42.", ".o.pinstream-tmp-"), None);
    assert_eq!(
        stale_pid(".o.pinstream-tmp-x.ab", ".o.pinstream-tmp-"),
        None
    );
    assert_eq!(
        stale_pid(".p.pinstream-tmp-42.ab", ".o.pinstream-tmp-"),
        None
    );
}

#[cfg(unix)] // unix file kinds, modes, links or uids: Windows has none of these (platform.rs)
#[test]
fn another_users_link_in_a_shared_folder_is_not_followed() {
    if os::effective_uid() != 0 {
        eprintln!("skipped: making a link owned by another user needs root");
        return;
    }
    // A folder like /tmp (sticky, world-writable), a file root owns, and a link to it that
    // another user (nobody, 65534) planted there.
    let d = dir("shared");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let precious = d.join("precious");
    std::fs::write(&precious, b"keep me").unwrap();
    let link = d.join("out.json");
    symlink(&precious, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    let e = prepare_output(&link).unwrap_err().to_string();
    assert!(
        e.contains("owned by another user (uid 65534)") && e.contains("does not follow"),
        "{e}"
    );
    assert_eq!(std::fs::read(&precious).unwrap(), b"keep me");
    // The same link owned by the folder's owner is followed.
    std::os::unix::fs::lchown(&link, Some(0), Some(0)).unwrap();
    assert!(prepare_output(&link).is_ok());
    std::fs::remove_dir_all(&d).unwrap();
}

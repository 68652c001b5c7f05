//! Every flag a message names exists on every command that can show it (issue 34): the
//! string literals of each source file (comments and test-only code left out) against the
//! commands that file speaks for. A flag inside a backticked command line (`` `bench
//! --gather` ``) is checked against that command instead. The advice that the library's
//! structured errors become is gated by [`Flags`](pinstream_cli::advice::Flags), whose lists
//! `applies`' tests check; `applies`' rules are checked there too.
//!
//! The files are listed at test time: every `.rs` file of the CLI's `src` and of the lab's
//! (`crates/pinstream-lab/src`, whose tools speak for the CLI's commands; named `lab PATH`)
//! must be classified here ([`CLI_FILES`], [`NOT_SWEPT`]) or be test-only code (a module declared under
//! `#[cfg(test)]`), so a new file cannot escape; every file of the library's `src` is swept for
//! any flag at all: the library's errors are data that each front phrases (a C or Python
//! caller has no flag; the CLI adds the flag in its advice, `advice.rs`).

use clap::CommandFactory;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const RUN: &[&str] = &["run"];
const BENCH: &[&str] = &["bench"];
const LATENCY: &[&str] = &["bench latency"];
const GATHER: &[&str] = &["bench gather"];
/// `bench` and its subcommands.
const BENCHES: &[&str] = &[
    "bench",
    "bench latency",
    "bench gather",
    "bench storage",
    "bench devices",
];
const DEMO: &[&str] = &["demo"];
const COMPARE: &[&str] = &["compare"];
const SOAK: &[&str] = &["soak"];
const DOCTOR: &[&str] = &["doctor"];
/// The commands that pick one device by `--device` (`device_sets::chosen`, `open_one`, or
/// `dispatch::open_asked` through `device_sets::choices`).
const PICKING: &[&str] = &[
    "bench",
    "bench latency",
    "bench gather",
    "bench storage",
    "compare",
    "run",
    "demo",
    "soak",
];
/// The commands that pick their OpenCL devices through `device_sets`: by `--device`, or by
/// `--devices` too.
const PICKING_OR_SETS: &[&str] = &[
    "bench",
    "bench latency",
    "bench gather",
    "bench storage",
    "bench devices",
    "compare",
    "run",
    "demo",
    "soak",
];
/// The commands that choose an API (`--api`, `dispatch::with_api`).
const API: &[&str] = &[
    "run",
    "bench",
    "bench latency",
    "bench gather",
    "bench devices",
    "compare",
    "demo",
    "doctor",
    "devices",
];
/// Files whose messages every command may show: they name no flag outside a backticked
/// command line.
const EVERY: &[&str] = &[];

/// Each file of the CLI's `src` and of the lab's (`lab PATH`) and the commands whose messages
/// it writes.
const CLI_FILES: &[(&str, &[&str])] = &[
    ("advice/checks.rs", RUN),
    ("cli/bench.rs", BENCH),
    ("cli/bench_devices.rs", &["bench devices"]),
    ("cli/bench_own.rs", &["bench latency", "bench gather"]),
    ("cli/bench_walk.rs", BENCH),
    ("cli/compare.rs", COMPARE),
    ("cli/demo.rs", DEMO),
    ("cli/device_sets.rs", PICKING_OR_SETS),
    ("cli/devices.rs", &["devices"]),
    ("cli/dispatch.rs", API),
    ("cli/doctor.rs", DOCTOR),
    ("cli/embedding.rs", DEMO),
    ("cli/files.rs", EVERY),
    ("cli/flags.rs", BENCHES),
    ("cli/gather.rs", GATHER),
    ("cli/latency.rs", LATENCY),
    ("cli/mod.rs", PICKING),
    (
        "cli/native.rs",
        &["bench latency", "bench gather", "compare"],
    ),
    ("cli/out.rs", EVERY),
    ("cli/progressive.rs", RUN),
    ("cli/report.rs", EVERY),
    ("cli/run/build.rs", RUN),
    ("cli/run/data.rs", RUN),
    ("cli/run/devices.rs", RUN),
    ("cli/run/mod.rs", RUN),
    ("cli/run/output.rs", RUN),
    ("cli/run/plan.rs", RUN),
    ("cli/run/settings.rs", RUN),
    ("cli/run/storage.rs", RUN),
    ("cli/run/stored.rs", RUN),
    ("cli/run/stream.rs", RUN),
    ("cli/run/tables.rs", RUN),
    ("cli/run/tiers.rs", RUN),
    ("cli/signals.rs", RUN),
    ("cli/soak.rs", SOAK),
    ("cli/storage_bench.rs", &["bench storage"]),
    ("cli/table.rs", EVERY),
    ("cli/version.rs", EVERY),
    ("lib.rs", EVERY),
    ("main.rs", EVERY),
    // The lab's files (crates/pinstream-lab/src): its tools speak for the CLI's commands.
    ("lab lib.rs", EVERY),
    ("lab kernels.rs", EVERY),
    ("lab tools/bench.rs", BENCH),
    ("lab tools/bench/points.rs", &["bench", "compare"]),
    ("lab tools/bench/walk.rs", BENCH),
    ("lab tools/bench_devices.rs", &["bench devices"]),
    ("lab tools/compare/half.rs", COMPARE),
    ("lab tools/compare/mod.rs", COMPARE),
    ("lab tools/compare/points.rs", COMPARE),
    ("lab tools/compare/report.rs", COMPARE),
    ("lab tools/compare/runs.rs", COMPARE),
    ("lab tools/compare/stream.rs", COMPARE),
    ("lab tools/cpu.rs", EVERY),
    ("lab tools/demo.rs", DEMO),
    ("lab tools/demo/data.rs", DEMO),
    ("lab tools/demo/streams.rs", DEMO),
    ("lab tools/doctor.rs", DOCTOR),
    ("lab tools/doctor/device.rs", EVERY),
    ("lab tools/doctor/measure.rs", DOCTOR),
    ("lab tools/doctor/report.rs", DOCTOR),
    ("lab tools/doctor/verdict.rs", DOCTOR),
    ("lab tools/embedding.rs", DEMO),
    ("lab tools/gather.rs", GATHER),
    ("lab tools/gather/ours.rs", GATHER),
    ("lab tools/gather/peak.rs", GATHER),
    ("lab tools/gather/pieces.rs", GATHER),
    ("lab tools/latency.rs", LATENCY),
    ("lab tools/latency/lanes.rs", LATENCY),
    ("lab tools/mapped.rs", &["doctor", "demo"]),
    ("lab tools/mod.rs", EVERY),
    ("lab tools/passes.rs", &["doctor", "bench"]),
    ("lab tools/pin_search.rs", DOCTOR),
    ("lab tools/random.rs", EVERY),
    ("lab tools/soak.rs", SOAK),
];

/// Files of the CLI's `src` (or the lab's) whose strings this sweep does not check, each with
/// why.
const NOT_SWEPT: &[(&str, &str)] = &[
    (
        "advice.rs",
        "its advice names a flag only where the command's Flags has it (applies' tests check the lists)",
    ),
    (
        "cli/applies.rs",
        "the rules' flags and messages: applies' tests check them against each command",
    ),
    (
        "cli/deprecated.rs",
        "it names bench's old mode flags on purpose, in the note that gives their new spelling; its tests check the rewriting",
    ),
];

/// Flags of other programs that messages name as such (cargo's, in build hints).
const NOT_OURS: &[&str] = &["--features"];

/// Programs other than pinstream whose backticked command lines messages quote.
const OTHER_PROGRAMS: &[&str] = &["cargo"];

/// Flags a file names in messages that only some of its commands show, each with why.
const ONLY_WHERE_SHOWN: &[(&str, &str, &str)] = &[
    (
        "advice/checks.rs",
        "--max-chunk",
        "validate_error names it only where the command's Flags has it (doctor)",
    ),
    (
        "cli/device_sets.rs",
        "--devices",
        "not_listed names --devices only for a --devices given, which the commands that take it alone pass",
    ),
    (
        "cli/device_sets.rs",
        "--device",
        "a --device given beside --devices is refused only where a command takes both; bench devices passes none",
    ),
    (
        "cli/flags.rs",
        "--strategy",
        "one_strategy and pinnings read the --strategy of the commands that take it",
    ),
    (
        "cli/flags.rs",
        "--sizes",
        "sizes() parses the --sizes of the commands that take it",
    ),
    (
        "cli/device_sets.rs",
        "--numa",
        "placement() and its report line are run's alone (run/devices.rs)",
    ),
    (
        "cli/dispatch.rs",
        "--vk-copy",
        "ApiOptions::vulkan_flag names the Vulkan flags given, which bench, demo and compare alone take",
    ),
    (
        "cli/dispatch.rs",
        "--vk-huge-pages",
        "ApiOptions::vulkan_flag names the Vulkan flags given, which bench, demo and compare alone take",
    ),
    (
        "cli/dispatch.rs",
        "--device",
        "open, open_asked and same_gpu serve the commands that pick a device; devices lists them all through with_api alone",
    ),
];

/// A swept file: its name in reports, its text, and the commands that show its messages.
struct Swept {
    name: String,
    text: String,
    shown_by: &'static [&'static str],
}

/// The `.rs` files under `root`, as paths relative to it with `/`, sorted.
fn rs_files(root: &Path) -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for e in entries.map(|e| e.unwrap().path()) {
            if e.is_dir() {
                walk(&e, root, out);
            } else if e.extension().is_some_and(|x| x == "rs") {
                let rel = e.strip_prefix(root).unwrap().components();
                let rel: Vec<String> = rel
                    .map(|c| c.as_os_str().to_string_lossy().into())
                    .collect();
                out.push(rel.join("/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// The files of `files` (each with its text) that are test-only code: modules declared
/// under `#[cfg(test)]`, and the modules they declare.
fn test_only(files: &[(String, String)]) -> BTreeSet<String> {
    let exists = |p: &String| files.iter().any(|(f, _)| f == p);
    let mut found = BTreeSet::new();
    for (file, text) in files {
        for item in scan(text).1 {
            found.extend(declared(file, &item).into_iter().filter(exists));
        }
    }
    loop {
        let more: Vec<String> = files
            .iter()
            .filter(|(f, _)| found.contains(f))
            .flat_map(|(f, text)| declared(f, text))
            .filter(|p| exists(p) && !found.contains(p))
            .collect();
        if more.is_empty() {
            return found;
        }
        found.extend(more);
    }
}

/// The files of the out-of-line modules (`mod NAME;`) that `text`, the text of `file`,
/// declares: both places each may be (`NAME.rs`, `NAME/mod.rs`), or its `#[path]`.
fn declared(file: &str, text: &str) -> Vec<String> {
    let dir = file.rsplit_once('/').map_or("", |(d, _)| d);
    let own = match file.rsplit('/').next() {
        Some("mod.rs" | "lib.rs" | "main.rs") => dir.to_string(),
        _ => file.trim_end_matches(".rs").to_string(),
    };
    let join = |d: &str, f: &str| {
        if d.is_empty() {
            f.to_string()
        } else {
            format!("{d}/{f}")
        }
    };
    let mut path = None;
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(p) = line.strip_prefix("#[path = \"") {
            path = p.split('"').next().map(String::from);
            continue;
        }
        let decl = line
            .trim_start_matches("pub ")
            .trim_start_matches("pub(crate) ");
        let name = decl.strip_prefix("mod ").and_then(|n| n.strip_suffix(';'));
        match (name, path.take()) {
            (Some(_), Some(p)) => out.push(join(dir, &p)),
            (Some(n), None) => {
                out.push(join(&own, &format!("{n}.rs")));
                out.push(join(&own, &format!("{n}/mod.rs")));
            }
            (None, p) => path = p.filter(|_| line.starts_with("#[")),
        }
    }
    out
}

/// Every file to sweep, with the commands that show its messages; and what is wrong with
/// the classification (a file neither classified nor test-only, an entry naming no file).
fn sources() -> (Vec<Swept>, Vec<String>) {
    let cli_root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib_root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../pinstream/src");
    let lab_root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../pinstream-lab/src");
    let read = |root: &Path| -> Vec<(String, String)> {
        let files = rs_files(root);
        let text = |f: &String| std::fs::read_to_string(root.join(f)).unwrap();
        files.iter().map(|f| (f.clone(), text(f))).collect()
    };
    let (cli, lib, lab) = (read(&cli_root), read(&lib_root), read(&lab_root));
    let (cli_tests, lib_tests, lab_tests) = (test_only(&cli), test_only(&lib), test_only(&lab));
    // The CLI's files and the lab's ("lab " and its path), test-only code left out.
    let cli = cli.into_iter().filter(|(f, _)| !cli_tests.contains(f));
    let lab = (lab.into_iter().filter(|(f, _)| !lab_tests.contains(f)))
        .map(|(f, text)| (format!("lab {f}"), text));
    let mut swept = Vec::new();
    let mut wrong = Vec::new();
    for (file, text) in cli.chain(lab) {
        let listed = CLI_FILES.iter().find(|(f, _)| *f == file);
        match (listed, NOT_SWEPT.iter().any(|(f, _)| *f == file)) {
            (Some(&(_, shown_by)), false) => swept.push(Swept { name: file, text, shown_by }),
            (None, true) => {}
            (Some(_), true) => wrong.push(format!("{file}: in both CLI_FILES and NOT_SWEPT")),
            (None, false) => wrong.push(format!(
                "{file}: not classified: add it to CLI_FILES with the commands that show its messages (or to NOT_SWEPT, saying why)"
            )),
        }
    }
    let classified = CLI_FILES
        .iter()
        .map(|(f, _)| *f)
        .chain(NOT_SWEPT.iter().map(|(f, _)| *f));
    let path = |f: &str| match f.strip_prefix("lab ") {
        Some(f) => lab_root.join(f),
        None => cli_root.join(f),
    };
    for f in classified.filter(|f| !path(f).exists()) {
        wrong.push(format!(
            "{f}: classified, but there is no such file: remove its entry"
        ));
    }
    for (file, text) in lib.into_iter().filter(|(f, _)| !lib_tests.contains(f)) {
        let name = format!("pinstream {file}");
        swept.push(Swept {
            name,
            text,
            shown_by: EVERY,
        });
    }
    (swept, wrong)
}

/// The string literals of `source`, comments left out, and its test-only items
/// (`#[cfg(test)]` or `#[cfg(all(test, …))]` and the item after it, as text), whose
/// literals are left out too.
fn scan(source: &str) -> (Vec<String>, Vec<String>) {
    let c: Vec<char> = source.chars().collect();
    let (mut out, mut tests) = (Vec::new(), Vec::new());
    // While in a test-only item: where it began, and the brackets and braces open in it.
    let mut skip: Option<(usize, i32, i32)> = None;
    let mut i = 0;
    while i < c.len() {
        if skip.is_none() && is_test_attribute(&c[i..]) {
            skip = Some((i, 0, 0));
        }
        let (token, next) = token(&c, i);
        match (&mut skip, token) {
            (None, Token::Str(s)) => out.push(s),
            (Some((from, brackets, braces)), Token::Other(ch)) => {
                match ch {
                    '[' => *brackets += 1,
                    ']' => *brackets -= 1,
                    '{' => *braces += 1,
                    '}' => *braces -= 1,
                    _ => {}
                }
                let closed = (ch == '}' || ch == ';') && *braces == 0 && *brackets == 0;
                if closed {
                    tests.push(c[*from..next].iter().collect());
                    skip = None;
                }
            }
            _ => {}
        }
        i = next;
    }
    // An attribute on what is no item (a field, an arm) would hide the rest of the file.
    assert!(
        skip.is_none(),
        "a test-only item runs to the end of the file"
    );
    (out, tests)
}

/// The string literals of `source`, comments and test-only items left out ([`scan`]).
fn literals(source: &str) -> Vec<String> {
    scan(source).0
}

/// `#[cfg(test)]` or `#[cfg(all(test, …))]` starts `c`.
fn is_test_attribute(c: &[char]) -> bool {
    let head: String = c.iter().take(16).collect();
    head.starts_with("#[cfg(test)]") || head.starts_with("#[cfg(all(test")
}

enum Token {
    /// A comment, a character literal or a lifetime's quote.
    Skipped,
    /// A string literal's text.
    Str(String),
    Other(char),
}

/// The token at `c[i]`, and where the next begins.
fn token(c: &[char], i: usize) -> (Token, usize) {
    let at = |k: usize| c.get(k).copied();
    match c[i] {
        '/' if at(i + 1) == Some('/') => {
            let end = (i..c.len()).find(|&k| c[k] == '\n').unwrap_or(c.len());
            (Token::Skipped, end)
        }
        '/' if at(i + 1) == Some('*') => {
            let end = (i + 2..c.len()).find(|&k| c[k] == '*' && at(k + 1) == Some('/'));
            (Token::Skipped, end.map_or(c.len(), |k| k + 2))
        }
        '\'' if at(i + 2) == Some('\'') || at(i + 1) == Some('\\') => {
            let end = (i + 2..c.len()).find(|&k| c[k] == '\'').unwrap_or(c.len());
            (Token::Skipped, end + 1)
        }
        'r' if matches!(at(i + 1), Some('#') | Some('"'))
            && !ident(i.checked_sub(1).and_then(at)) =>
        {
            let hashes = c[i + 1..].iter().take_while(|&&x| x == '#').count();
            let start = i + 2 + hashes;
            let end = (start..c.len())
                .find(|&k| c[k] == '"' && c[k + 1..].iter().take(hashes).all(|&x| x == '#'))
                .unwrap_or(c.len());
            (Token::Str(c[start..end].iter().collect()), end + 1 + hashes)
        }
        '"' => {
            let (mut s, mut k) = (String::new(), i + 1);
            while k < c.len() && c[k] != '"' {
                if c[k] == '\\' {
                    k += 1;
                }
                s.extend(at(k));
                k += 1;
            }
            (Token::Str(s), k + 1)
        }
        ch => (Token::Other(ch), i + 1),
    }
}

fn ident(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// The flags `text` names (`--name`), each with the command a backticked command line around
/// it names (`` `pinstream devices --api cuda` ``), if one does.
fn flags(text: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for (k, part) in text.split('`').enumerate() {
        let quoted = k % 2 == 1;
        let words: Vec<&str> = part.split_whitespace().collect();
        let command = match words.as_slice() {
            ["pinstream", c, rest @ ..] | [c, rest @ ..] if quoted => Some(command_of(c, rest)),
            _ => None,
        };
        let mut rest = part;
        while let Some(at) = rest.find("--") {
            rest = &rest[at + 2..];
            let name: String = (rest.chars())
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
                .collect();
            let name = name.trim_end_matches('-');
            if name.starts_with(|c: char| c.is_ascii_lowercase()) {
                out.push((format!("--{name}"), command.clone()));
            }
        }
    }
    out
}

/// The command a quoted command line runs: `c`, with its subcommand where `rest` starts with
/// one of `bench`'s (`bench latency --samples 10` is `bench latency`).
fn command_of(c: &str, rest: &[&str]) -> String {
    match rest.first() {
        Some(sub) if c == "bench" && BENCH_MODES.contains(sub) => format!("{c} {sub}"),
        _ => c.to_string(),
    }
}

/// `bench`'s subcommands.
const BENCH_MODES: &[&str] = &["latency", "gather", "storage", "devices"];

#[test]
fn every_source_file_is_classified() {
    let (swept, wrong) = sources();
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    // The walk found the files: some of each crate, this one's own among the test-only.
    assert!(swept.iter().any(|s| s.name == "cli/run/mod.rs"));
    assert!(swept.iter().any(|s| s.name == "lab tools/demo.rs"));
    assert!(swept.iter().any(|s| s.name == "pinstream host/vulkan.rs"));
    assert!(!swept.iter().any(|s| s.name.contains("messages_sweep")));
}

#[test]
fn every_flag_a_message_names_is_the_commands_own() {
    let cli = super::Cli::command();
    let has = |command: &str, flag: &str| {
        let mut names = command.split(' ');
        let top = names.next().and_then(|n| cli.find_subcommand(n));
        let sub = names.try_fold(top, |c, n| Some(c?.find_subcommand(n)));
        let long = flag.trim_start_matches("--");
        sub.flatten()
            .is_some_and(|s| s.get_arguments().any(|a| a.get_long() == Some(long)))
    };
    let commands: Vec<String> = cli.get_subcommands().map(|s| s.get_name().into()).collect();
    let mut wrong = Vec::new();
    for Swept {
        name: file,
        text: source,
        shown_by,
    } in sources().0
    {
        let library = file.starts_with("pinstream ");
        for text in literals(&source) {
            for (flag, quoted) in flags(&text) {
                if quoted
                    .as_deref()
                    .is_some_and(|c| OTHER_PROGRAMS.contains(&c))
                {
                    continue;
                }
                let only = |o: &(&str, &str, &str)| o.0 == file && o.1 == flag;
                if NOT_OURS.contains(&flag.as_str()) || ONLY_WHERE_SHOWN.iter().any(only) {
                    continue;
                }
                if library {
                    wrong.push(format!(
                        "{file}: {flag} in a library message (C and Python callers have no flags: name the fix in the library's terms, and the flag in the CLI's advice): {text}"
                    ));
                    continue;
                }
                let top = |c: &String| commands.iter().any(|k| c.split(' ').next() == Some(k));
                let by: Vec<String> = match quoted.filter(top) {
                    Some(c) => vec![c],
                    None => shown_by.iter().map(|c| c.to_string()).collect(),
                };
                if by.is_empty() {
                    wrong.push(format!(
                        "{file}: {flag} in a message every command shows: {text}"
                    ));
                }
                for c in by.iter().filter(|c| !has(c, &flag)) {
                    wrong.push(format!("{file}: `{c}` has no {flag}: {text}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// The sweep itself: literals found past comments, char literals, raw strings and test-only
/// items, and flags tied to the command a backticked line names.
#[test]
fn the_sweep_finds_flags_in_strings_only() {
    let src = "// \"--not\"\nlet q = '\"'; let a = \"x --one\"; let b = r#\"y \"--two\"\"#;";
    assert_eq!(literals(src), ["x --one", "y \"--two\""]);
    let f = flags("pass --a, or run `pinstream devices --api cuda` (--b-)");
    let want = [("--a", None), ("--api", Some("devices")), ("--b", None)];
    let want: Vec<(String, Option<String>)> = want
        .iter()
        .map(|(f, c)| (f.to_string(), c.map(String::from)))
        .collect();
    assert_eq!(f, want);
    let src = "/* \"--c\" */ fn f() {}\n#[cfg(test)]\nfn g() { h(\"--d\", [1; 2]) }\nconst E: &str = \"--e\";\n#[cfg(all(test, unix))]\n#[path = \"t.rs\"]\nmod t;\n#[cfg(test)]\nmod tests {\n    const F: &str = \"}\";\n}\n";
    let (literals, tests) = scan(src);
    assert_eq!(literals, ["--e"]);
    assert_eq!(tests.len(), 3, "{tests:?}");
    assert_eq!(declared("a/b.rs", &tests[1]), ["a/t.rs"]);
    assert_eq!(declared("a/mod.rs", "mod x;"), ["a/x.rs", "a/x/mod.rs"]);
    assert_eq!(
        declared("a/b.rs", "pub mod x;"),
        ["a/b/x.rs", "a/b/x/mod.rs"]
    );
}

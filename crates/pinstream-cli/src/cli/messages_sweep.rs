//! Every flag a message names exists on every command that can show it (issue 34): the
//! string literals of each source file (comments and its tests left out) against the commands
//! that file speaks for. A flag inside a backticked command line (`` `bench --gather` ``) is
//! checked against that command instead. The advice that the library's structured errors
//! become is gated by [`Flags`](pinstream_cli::advice::Flags), whose lists `applies`' tests
//! check; `applies`' rules are checked there too.

use clap::CommandFactory;

const RUN: &[&str] = &["run"];
const BENCH: &[&str] = &["bench"];
const DEMO: &[&str] = &["demo"];
/// The commands that pick one device by `--device` (`pick_device`).
const PICKING: &[&str] = &["bench", "compare", "run", "demo", "soak"];
/// The commands that take several devices (`device_sets`).
const SETS: &[&str] = &["bench", "compare", "run", "demo"];

/// Each file, its text, and the commands whose messages it writes.
const FILES: &[(&str, &str, &[&str])] = &[
    ("advice/checks.rs", include_str!("../advice/checks.rs"), RUN),
    ("cli/bench.rs", include_str!("bench.rs"), BENCH),
    ("cli/bench_own.rs", include_str!("bench_own.rs"), BENCH),
    ("cli/bench_walk.rs", include_str!("bench_walk.rs"), BENCH),
    ("cli/compare.rs", include_str!("compare.rs"), &["compare"]),
    ("cli/demo.rs", include_str!("demo.rs"), DEMO),
    ("cli/device_sets.rs", include_str!("device_sets.rs"), SETS),
    ("cli/devices.rs", include_str!("devices.rs"), &["devices"]),
    ("cli/doctor.rs", include_str!("doctor.rs"), &["doctor"]),
    ("cli/embedding.rs", include_str!("embedding.rs"), DEMO),
    ("cli/files.rs", include_str!("files.rs"), &[]),
    ("cli/gather.rs", include_str!("gather.rs"), BENCH),
    ("cli/latency.rs", include_str!("latency.rs"), BENCH),
    ("cli/mod.rs", include_str!("mod.rs"), PICKING),
    ("cli/out.rs", include_str!("out.rs"), &[]),
    ("cli/progressive.rs", include_str!("progressive.rs"), RUN),
    ("cli/report.rs", include_str!("report.rs"), &[]),
    ("cli/run/build.rs", include_str!("run/build.rs"), RUN),
    ("cli/run/data.rs", include_str!("run/data.rs"), RUN),
    ("cli/run/devices.rs", include_str!("run/devices.rs"), RUN),
    ("cli/run/mod.rs", include_str!("run/mod.rs"), RUN),
    ("cli/run/output.rs", include_str!("run/output.rs"), RUN),
    ("cli/run/plan.rs", include_str!("run/plan.rs"), RUN),
    ("cli/run/settings.rs", include_str!("run/settings.rs"), RUN),
    ("cli/run/storage.rs", include_str!("run/storage.rs"), RUN),
    ("cli/run/stored.rs", include_str!("run/stored.rs"), RUN),
    ("cli/run/stream.rs", include_str!("run/stream.rs"), RUN),
    ("cli/run/tables.rs", include_str!("run/tables.rs"), RUN),
    ("cli/signals.rs", include_str!("signals.rs"), RUN),
    ("cli/soak.rs", include_str!("soak.rs"), &["soak"]),
    (
        "cli/storage_bench.rs",
        include_str!("storage_bench.rs"),
        BENCH,
    ),
    ("tools/bench.rs", include_str!("../tools/bench.rs"), BENCH),
    (
        "tools/bench/walk.rs",
        include_str!("../tools/bench/walk.rs"),
        BENCH,
    ),
    (
        "tools/compare/mod.rs",
        include_str!("../tools/compare/mod.rs"),
        &["compare"],
    ),
    (
        "tools/compare/half.rs",
        include_str!("../tools/compare/half.rs"),
        &["compare"],
    ),
    ("tools/demo.rs", include_str!("../tools/demo.rs"), DEMO),
    (
        "tools/doctor.rs",
        include_str!("../tools/doctor.rs"),
        &["doctor"],
    ),
    (
        "tools/embedding.rs",
        include_str!("../tools/embedding.rs"),
        DEMO,
    ),
    ("tools/gather.rs", include_str!("../tools/gather.rs"), BENCH),
    (
        "tools/gather/api.rs",
        include_str!("../tools/gather/api.rs"),
        BENCH,
    ),
    (
        "tools/latency.rs",
        include_str!("../tools/latency.rs"),
        BENCH,
    ),
    ("tools/soak.rs", include_str!("../tools/soak.rs"), &["soak"]),
    // The library's files reach C and Python callers too: they name no flag at all.
    (
        "pinstream engine/storage.rs",
        include_str!("../../../pinstream/src/engine/storage.rs"),
        &[],
    ),
    (
        "pinstream engine/io/mod.rs",
        include_str!("../../../pinstream/src/engine/io/mod.rs"),
        &[],
    ),
    (
        "pinstream engine/io/direct.rs",
        include_str!("../../../pinstream/src/engine/io/direct.rs"),
        &[],
    ),
    (
        "pinstream engine/io/output.rs",
        include_str!("../../../pinstream/src/engine/io/output.rs"),
        &[],
    ),
    (
        "pinstream backend/os/cache.rs",
        include_str!("../../../pinstream/src/backend/os/cache.rs"),
        &[],
    ),
    (
        "pinstream backend/opencl/adopt.rs",
        include_str!("../../../pinstream/src/backend/opencl/adopt.rs"),
        &[],
    ),
];

/// Flags of other programs that messages name as such (cargo's, in build hints).
const NOT_OURS: &[&str] = &["--features"];

/// Flags a file names in messages that only some of its commands show, each with why.
const ONLY_WHERE_SHOWN: &[(&str, &str, &str)] = &[
    (
        "advice/checks.rs",
        "--max-chunk",
        "validate_error names it only where the command's Flags has it (doctor)",
    ),
    (
        "cli/device_sets.rs",
        "--numa",
        "placement() and its report line are run's alone (run/devices.rs)",
    ),
];

/// The string literals of `source`, its test module and comments left out.
fn literals(source: &str) -> Vec<String> {
    let code = source
        .split("\n#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or(source);
    let c: Vec<char> = code.chars().collect();
    let (mut out, mut i) = (Vec::new(), 0);
    while i < c.len() {
        match c[i] {
            '/' if c.get(i + 1) == Some(&'/') => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            '\'' if c.get(i + 2) == Some(&'\'') || c.get(i + 1) == Some(&'\\') => {
                i += if c.get(i + 1) == Some(&'\\') { 4 } else { 3 };
            }
            'r' if matches!(c.get(i + 1), Some('#') | Some('"'))
                && !ident(c.get(i.wrapping_sub(1))) =>
            {
                let hashes = c[i + 1..].iter().take_while(|&&x| x == '#').count();
                let start = i + 2 + hashes;
                let end = (start..c.len())
                    .find(|&k| c[k] == '"' && c[k + 1..].iter().take(hashes).all(|&x| x == '#'))
                    .unwrap_or(c.len());
                out.push(c[start..end].iter().collect());
                i = end + 1 + hashes;
            }
            '"' => {
                let mut s = String::new();
                i += 1;
                while i < c.len() && c[i] != '"' {
                    if c[i] == '\\' {
                        i += 1;
                    }
                    s.push(c[i]);
                    i += 1;
                }
                out.push(s);
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

fn ident(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// The flags `text` names (`--name`), each with the command a backticked command line around
/// it names (`` `pinstream devices --api cuda` ``), if one does.
fn flags(text: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for (k, part) in text.split('`').enumerate() {
        let quoted = k % 2 == 1;
        let words: Vec<&str> = part.split_whitespace().collect();
        let command = match words.as_slice() {
            ["pinstream", c, ..] | [c, ..] if quoted => Some(c.to_string()),
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

#[test]
fn every_flag_a_message_names_is_the_commands_own() {
    let cli = super::Cli::command();
    let has = |command: &str, flag: &str| {
        let sub = cli.find_subcommand(command);
        let long = flag.trim_start_matches("--");
        sub.is_some_and(|s| s.get_arguments().any(|a| a.get_long() == Some(long)))
    };
    let commands: Vec<String> = cli.get_subcommands().map(|s| s.get_name().into()).collect();
    let mut wrong = Vec::new();
    for (file, source, shown_by) in FILES {
        for text in literals(source) {
            for (flag, quoted) in flags(&text) {
                let by: Vec<String> = match quoted.filter(|c| commands.contains(c)) {
                    Some(c) => vec![c],
                    None => shown_by.iter().map(|c| c.to_string()).collect(),
                };
                let only = |o: &(&str, &str, &str)| o.0 == *file && o.1 == flag;
                if NOT_OURS.contains(&flag.as_str()) || ONLY_WHERE_SHOWN.iter().any(only) {
                    continue;
                }
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

/// The sweep itself: literals found past comments, char literals and raw strings, and
/// flags tied to the command a backticked line names.
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
}

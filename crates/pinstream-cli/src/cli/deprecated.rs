//! The old spellings of `bench`'s modes, kept for one release: `bench --latency`,
//! `--gather`, `--storage FILE` and `--devices SET` are the subcommands `bench latency`,
//! `bench gather`, `bench storage FILE` and `bench devices --devices SET` now. [`rewrite`]
//! turns an old command line into the new one before clap reads it, with a note to print.
//! Delete this file (and its call in `cli::main`) in the release after.

use std::ffi::OsString;

/// An old mode flag of `bench`: its flag, the subcommand it became, and whether it takes a
/// value (moved along: as `FILE` for storage, as `--devices SET` for devices).
struct OldMode {
    flag: &'static str,
    subcommand: &'static str,
    value: Value,
}

/// What becomes of an old flag's value.
#[derive(Clone, Copy, PartialEq)]
enum Value {
    /// The flag takes none.
    None,
    /// It becomes the subcommand's positional argument.
    Positional,
    /// It stays the flag's value (the subcommand takes the same flag).
    Kept,
}

const OLD_MODES: [OldMode; 4] = [
    OldMode {
        flag: "--latency",
        subcommand: "latency",
        value: Value::None,
    },
    OldMode {
        flag: "--gather",
        subcommand: "gather",
        value: Value::None,
    },
    OldMode {
        flag: "--storage",
        subcommand: "storage",
        value: Value::Positional,
    },
    OldMode {
        flag: "--devices",
        subcommand: "devices",
        value: Value::Kept,
    },
];

/// `args` (the whole command line, the program first) in the new spelling, and the note that
/// says so, where it used an old one; else `args` as they are and no note.
pub fn rewrite(args: Vec<OsString>) -> (Vec<OsString>, Option<String>) {
    let is_bench = args.get(1).is_some_and(|a| a == "bench");
    let has_subcommand = args
        .get(2)
        .is_some_and(|a| OLD_MODES.iter().any(|m| a == m.subcommand));
    if !is_bench || has_subcommand {
        return (args, None);
    }
    let found = args.iter().enumerate().skip(2).find_map(|(i, a)| {
        let a = a.to_str()?;
        OLD_MODES.iter().find_map(|m| {
            let inline = a.strip_prefix(m.flag)?.strip_prefix('=');
            (a == m.flag || (m.value != Value::None && inline.is_some()))
                .then(|| (i, m, inline.map(OsString::from)))
        })
    });
    let Some((at, mode, inline)) = found else {
        return (args, None);
    };
    let mut rest = args;
    let mut tail = rest.split_off(at);
    tail.remove(0);
    let value = match (mode.value, inline) {
        (Value::None, _) => None,
        (_, Some(v)) => Some(v),
        (_, None) if !tail.is_empty() => Some(tail.remove(0)),
        (_, None) => None,
    };
    let mut new = vec![rest[0].clone(), rest[1].clone(), mode.subcommand.into()];
    let spelled = match (mode.value, value) {
        (Value::Positional, Some(v)) => {
            new.push(v);
            format!("pinstream bench {} FILE", mode.subcommand)
        }
        (Value::Kept, Some(v)) => {
            new.extend([mode.flag.into(), v]);
            format!("pinstream bench {} {} SET", mode.subcommand, mode.flag)
        }
        _ => format!("pinstream bench {}", mode.subcommand),
    };
    new.extend(rest.drain(2..));
    new.extend(tail);
    let note = format!(
        "`bench {}` is deprecated and goes in the next release: use `{spelled}`",
        mode.flag
    );
    (new, Some(note))
}

#[cfg(test)]
mod tests {
    use super::rewrite;
    use std::ffi::OsString;

    fn words(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    fn new(s: &str) -> (String, Option<String>) {
        let (args, note) = rewrite(words(s));
        let args: Vec<String> = args.iter().map(|a| a.to_string_lossy().into()).collect();
        (args.join(" "), note)
    }

    #[test]
    fn each_old_mode_flag_becomes_its_subcommand_with_a_note() {
        let cases = [
            ("p bench --latency --sizes 4KiB", "p bench latency --sizes 4KiB", "`bench --latency` is deprecated and goes in the next release: use `pinstream bench latency`"),
            ("p bench --json --gather", "p bench gather --json", "`bench --gather` is deprecated and goes in the next release: use `pinstream bench gather`"),
            ("p bench --storage f --json", "p bench storage f --json", "`bench --storage` is deprecated and goes in the next release: use `pinstream bench storage FILE`"),
            ("p bench --storage=f", "p bench storage f", "`bench --storage` is deprecated and goes in the next release: use `pinstream bench storage FILE`"),
            ("p bench --sizes 64KiB --devices all", "p bench devices --devices all --sizes 64KiB", "`bench --devices` is deprecated and goes in the next release: use `pinstream bench devices --devices SET`"),
        ];
        for (old, want, note) in cases {
            assert_eq!(new(old), (want.into(), Some(note.into())), "{old}");
        }
    }

    #[test]
    fn the_new_spelling_and_other_commands_stay_as_they_are() {
        for s in [
            "p bench latency --sizes 4KiB",
            "p bench devices --devices all",
            "p bench --sizes 4KiB",
            "p run --devices all --synthetic 1KiB",
            "p bench",
            "p",
        ] {
            assert_eq!(new(s), (s.into(), None), "{s}");
        }
    }
}

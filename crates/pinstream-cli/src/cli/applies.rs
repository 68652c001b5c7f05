//! Which flags apply in which mode, where clap cannot say it (it depends on a flag's value):
//! one table ([`RULES`]) checked in one place ([`check`]) when the arguments are parsed, so
//! that a flag the command would ignore is refused, always with the same shape of message:
//! `--FLAG [VALUE] does not apply with|without --MODE [VALUE]: what to do`. Which flags a
//! command or subcommand takes at all (`bench latency` takes `--samples`, `bench` does not)
//! is clap's to say.
//!
//! A flag counts as given only when it is on the command line (a default never conflicts).

use clap::parser::ValueSource;
use clap::ArgMatches;

/// A condition on one flag of the command line: its long name, and the values that meet it
/// (empty: any value, as long as it is given).
type On = (&'static str, &'static [&'static str]);

/// `flag` does not apply with (or, `without`, when `mode` is not given) `mode`.
struct Rule {
    /// The subcommand (`bench latency`: a subcommand's own).
    command: &'static str,
    /// The flag that does not apply.
    flag: On,
    /// The mode it does not apply with.
    mode: On,
    /// True: `flag` applies only with `mode`.
    without: bool,
    /// What to do instead.
    fix: &'static str,
}

const fn with(command: &'static str, flag: On, mode: On, fix: &'static str) -> Rule {
    Rule {
        command,
        flag,
        mode,
        without: false,
        fix,
    }
}

const fn without(command: &'static str, flag: On, mode: On, fix: &'static str) -> Rule {
    Rule {
        command,
        flag,
        mode,
        without: true,
        fix,
    }
}

const ANY: &[&str] = &[];
const CUDA: &[&str] = &["cuda"];
const VULKAN: &[&str] = &["vulkan"];

/// Every combination that does not apply, in the order they are checked.
const RULES: &[Rule] = &[
    with("bench", ("strategy", ANY), ("api", CUDA), "--strategy picks OpenCL strategies, and --api cuda measures cuMemHostAlloc and cuMemHostRegister memory: leave --strategy out, or use --api both"),
    with("bench", ("strategy", ANY), ("api", VULKAN), "--strategy picks OpenCL strategies, and --api vulkan measures every way Vulkan pins (import, host-visible): leave --strategy out"),
    with("bench latency", ("strategy", ANY), ("api", VULKAN), "--strategy picks OpenCL strategies, and --api vulkan measures Vulkan's own pinning: leave --strategy out"),
    with("bench devices", ("strategy", ANY), ("api", VULKAN), "--strategy picks OpenCL strategies, and --api vulkan measures every way Vulkan pins (import, host-visible): leave --strategy out"),
    with("run", ("device", ANY), ("devices", ANY), "name the one device in --devices, or leave --devices out"),
    with("run", ("strategy", ANY), ("api", CUDA), "--strategy picks OpenCL strategies, and --api cuda pins with cuMemHostRegister: leave --strategy out"),
    with("run", ("wait", ANY), ("api", CUDA), "--wait sets how OpenCL waits for commands: leave it out with --api cuda"),
    with("run", ("numa", ANY), ("api", CUDA), "--api cuda places no memory on NUMA nodes: leave --numa out"),
    with("run", ("strategy", ANY), ("api", VULKAN), "--strategy picks OpenCL strategies, and --api vulkan imports pinstream's pages (VK_EXT_external_memory_host) where the driver offers it, else uses its host-visible memory: leave --strategy out"),
    with("run", ("wait", ANY), ("api", VULKAN), "--wait sets how OpenCL waits for commands: leave it out with --api vulkan"),
    with("run", ("numa", ANY), ("api", VULKAN), "--api vulkan places no memory on NUMA nodes: leave --numa out"),
    without("run", ("numa", &["on"]), ("devices", ANY), "--numa on binds each device's share of several devices to the device's node: add --devices, or leave --numa out"),
    without("run", ("seed", ANY), ("synthetic", ANY), "--seed draws the --synthetic inputs: add --synthetic SIZE, or leave --seed out"),
    with("demo", ("device", ANY), ("devices", ANY), "name the one device in --devices, or leave --devices out"),
    with("compare", ("device", ANY), ("devices", ANY), "name the one device in --devices, or leave --devices out"),
];

/// The first flag of `matches` (the whole command line) that does not apply with the others,
/// as the message that says so and what to do.
pub fn check(matches: &ArgMatches) -> Result<(), String> {
    let (mut command, mut m) = (String::new(), matches);
    while let Some((name, sub)) = m.subcommand() {
        command = [command, name.to_string()].join(" ").trim().to_string();
        m = sub;
    }
    let broken = RULES
        .iter()
        .filter(|r| r.command == command)
        .find(|r| meets(m, r.flag) && meets(m, r.mode) != r.without);
    broken.map_or(Ok(()), |r| Err(message(m, r)))
}

/// The flag `on` names is given on the command line, with one of its values (if any; a flag
/// without a value, such as `--latency`, meets `ANY` when given).
fn meets(m: &ArgMatches, (long, values): On) -> bool {
    let id = id_of(long);
    if m.value_source(&id) != Some(ValueSource::CommandLine) {
        return false;
    }
    values.is_empty()
        || m.get_raw(&id)
            .into_iter()
            .flatten()
            .any(|v| values.iter().any(|w| v == *w))
}

/// The clap id of a long flag (the field's name).
fn id_of(long: &str) -> String {
    long.replace('-', "_")
}

/// `--FLAG [VALUE] does not apply with|without --MODE [VALUE]: fix`, with the values as given.
fn message(m: &ArgMatches, r: &Rule) -> String {
    let given = |(long, values): On| match values {
        [] => format!("--{long}"),
        _ => {
            let raw = m.get_raw(&id_of(long)).into_iter().flatten();
            let v = raw
                .map(|v| v.to_string_lossy())
                .find(|v| values.contains(&&**v));
            format!("--{long} {}", v.unwrap_or_default())
        }
    };
    let mode = match r.without {
        true => format!("--{}", r.mode.0),
        false => given(r.mode),
    };
    let how = if r.without { "without" } else { "with" };
    format!("{} does not apply {how} {mode}: {}", given(r.flag), r.fix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every rule names a subcommand and flags that exist, with values the flag takes, and
    /// its fix names only flags of that subcommand.
    #[test]
    fn every_rule_names_real_flags() {
        let cli = super::super::Cli::command();
        for r in RULES {
            let sub = r
                .command
                .split(' ')
                .fold(&cli, |c, name| c.find_subcommand(name).expect(r.command));
            for (long, _) in [r.flag, r.mode] {
                let arg = sub.get_arguments().find(|a| a.get_long() == Some(long));
                let arg = arg.unwrap_or_else(|| panic!("{} has no --{long}", r.command));
                assert_eq!(arg.get_id().as_str(), id_of(long), "{} --{long}", r.command);
            }
            for word in r
                .fix
                .split(|c: char| c.is_whitespace() || c == ',' || c == ':')
            {
                let Some(long) = word.strip_prefix("--") else {
                    continue;
                };
                let has = sub.get_arguments().any(|a| a.get_long() == Some(long));
                assert!(has, "{}: {} has no --{long}", r.fix, r.command);
            }
        }
    }

    /// The advice of each command names only flags the command takes.
    #[test]
    fn advice_flags_are_the_commands_own() {
        use pinstream_cli::advice::Flags;
        let cli = super::super::Cli::command();
        for (command, flags) in [
            ("run", Flags::RUN),
            ("demo", Flags::DEMO),
            ("compare", Flags::COMPARE),
            ("bench gather", Flags::BENCH),
            ("soak", Flags::SOAK),
            ("doctor", Flags::DOCTOR),
        ] {
            let sub = command
                .split(' ')
                .fold(&cli, |c, name| c.find_subcommand(name).expect(command));
            for f in flags.0 {
                let long = f.trim_start_matches("--");
                assert!(
                    sub.get_arguments().any(|a| a.get_long() == Some(long)),
                    "{command} takes no {f}"
                );
            }
        }
    }

    fn check_args(args: &[&str]) -> Result<(), String> {
        let m = super::super::Cli::command()
            .try_get_matches_from(args)
            .unwrap();
        check(&m)
    }

    #[test]
    fn a_default_value_never_conflicts_and_a_given_one_does() {
        assert_eq!(check_args(&["pinstream", "bench", "latency"]), Ok(()));
        assert_eq!(
            check_args(&["pinstream", "bench", "latency", "--api", "vulkan", "--strategy", "auto"]),
            Err("--strategy does not apply with --api vulkan: --strategy picks OpenCL strategies, and --api vulkan measures Vulkan's own pinning: leave --strategy out".into())
        );
        assert_eq!(
            check_args(&[
                "pinstream",
                "bench",
                "latency",
                "--strategy",
                "pinned-alloc"
            ]),
            Ok(())
        );
    }

    #[test]
    fn clap_refuses_a_flag_of_another_mode() {
        let refused = |args: &[&str]| {
            super::super::Cli::command()
                .try_get_matches_from(args)
                .is_err()
        };
        assert!(refused(&["pinstream", "bench", "--staging", "1MiB"]));
        assert!(refused(&["pinstream", "bench", "latency", "--pieces", "4"]));
        assert!(refused(&[
            "pinstream",
            "bench",
            "latency",
            "--strategy",
            "all"
        ]));
        assert!(refused(&["pinstream", "bench", "gather", "--api", "cuda"]));
        assert!(refused(&["pinstream", "bench", "devices", "--device", "0"]));
    }
}

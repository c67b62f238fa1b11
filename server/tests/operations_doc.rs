//! `docs/operations.md` lists every flag of every command, with its
//! environment variable and default, exactly as the binary's `--help`
//! states them (both come from the same clap definition): a flag added,
//! renamed or dropped without the guide fails here, and so does a flag the
//! guide lists that does not exist.

use std::collections::BTreeMap;

use clap::CommandFactory;
use idemkey_server::config::Cli;

/// What the guide's table says of one flag: (environment, default).
type Rows = BTreeMap<String, (String, String)>;

/// The table of one command as `--help` implies it, to paste into the
/// guide when it is missing or stale (the last column is clap's help text).
fn table(cmd: &str) -> String {
    let mut command = Cli::command();
    let mut node = &mut command;
    for part in cmd.split(' ') {
        node = node.find_subcommand_mut(part).expect("subcommand");
    }
    let mut out = format!(
        "### `idemkey-server {cmd}`\n\n| flag | environment | default | what |\n|---|---|---|---|\n"
    );
    let rows = &commands_from_help()[cmd];
    for arg in node.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if let Some((env, default)) = rows.get(&format!("--{long}")) {
            let help = arg
                .get_help()
                .map(|h| h.to_string().replace('\n', " "))
                .unwrap_or_default();
            out.push_str(&format!("| `--{long}` | {env} | {default} | {help} |\n"));
        }
    }
    out
}

const GUIDE: &str = include_str!("../../docs/operations.md");

/// `"serve"`, `"account create"`… with the rows `--help` implies.
fn commands_from_help() -> BTreeMap<String, Rows> {
    fn walk(cmd: &clap::Command, path: &str, out: &mut BTreeMap<String, Rows>) {
        let mut rows = Rows::new();
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if arg.is_hide_set() || long == "help" || long == "version" {
                continue;
            }
            let env = arg
                .get_env()
                .map(|e| format!("`{}`", e.to_string_lossy()))
                .unwrap_or_else(|| "—".into());
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let default = if defaults.is_empty() || defaults == ["false"] {
                "—".into()
            } else {
                format!("`{}`", defaults.join(","))
            };
            rows.insert(format!("--{long}"), (env, default));
        }
        if !path.is_empty() && (cmd.get_subcommands().next().is_none() || !rows.is_empty()) {
            out.insert(path.to_owned(), rows);
        }
        for sub in cmd.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            let sub_path = if path.is_empty() {
                sub.get_name().to_owned()
            } else {
                format!("{path} {}", sub.get_name())
            };
            walk(sub, &sub_path, out);
        }
    }
    let mut out = BTreeMap::new();
    walk(&Cli::command(), "", &mut out);
    out
}

/// The guide's `### \`idemkey-server …\`` sections and their flag rows.
fn commands_from_guide() -> BTreeMap<String, Rows> {
    let mut out: BTreeMap<String, Rows> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in GUIDE.lines() {
        if let Some(rest) = line.strip_prefix("### `idemkey-server ") {
            let name = rest.trim_end_matches('`').to_owned();
            out.entry(name.clone()).or_default();
            current = Some(name);
        } else if line.starts_with("## ") || line.starts_with("### ") {
            current = None;
        } else if let (Some(cmd), Some(row)) = (&current, line.strip_prefix("| `--")) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let flag = format!("--{}", cells[0].trim_end_matches('`'));
            let env = cells.get(1).copied().unwrap_or("").to_owned();
            let default = cells.get(2).copied().unwrap_or("").to_owned();
            out.get_mut(cmd)
                .expect("section")
                .insert(flag, (env, default));
        }
    }
    out
}

#[test]
fn the_guide_lists_every_flag_as_help_states_it() {
    let help = commands_from_help();
    let guide = commands_from_guide();
    let mut faults = Vec::new();
    for (cmd, rows) in &help {
        let Some(documented) = guide.get(cmd) else {
            faults.push(format!("no section for {cmd}; paste:\n\n{}", table(cmd)));
            continue;
        };
        for (flag, (env, default)) in rows {
            match documented.get(flag) {
                None => faults.push(format!(
                    "{cmd}: missing row | `{flag}` | {env} | {default} | … |"
                )),
                Some(row) if row != &(env.clone(), default.clone()) => faults.push(format!(
                    "{cmd}: row for {flag} says {row:?}, --help says ({env}, {default})"
                )),
                Some(_) => {}
            }
        }
        for flag in documented.keys() {
            if !rows.contains_key(flag) {
                faults.push(format!("{cmd}: {flag} is in the guide but not in --help"));
            }
        }
    }
    for cmd in guide.keys() {
        if !help.contains_key(cmd) {
            faults.push(format!(
                "the guide documents `idemkey-server {cmd}`, which does not exist"
            ));
        }
    }
    assert!(
        faults.is_empty(),
        "docs/operations.md:\n{}",
        faults.join("\n")
    );
}

#[test]
fn the_check_reads_the_guide() {
    // The parser above finds the guide's sections and rows: a guide it
    // could not read would make the comparison vacuous.
    let guide = commands_from_guide();
    let serve = guide.get("serve").expect("a serve section");
    assert_eq!(
        serve.get("--bind"),
        Some(&("`IDEMKEY_BIND`".to_owned(), "`127.0.0.1:3000`".to_owned()))
    );
    assert!(guide.len() >= 4, "{:?}", guide.keys().collect::<Vec<_>>());
}

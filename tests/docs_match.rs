//! The docs list what the code has: every flag of every subcommand's `--help` (the built
//! binary's) is in a flag table of README.md, with its environment variable where it has one,
//! and every route the server registers (the `.route("...")` calls under src/server) is in
//! docs/api.md as `` `METHOD /path` ``. A flag or route added without its line fails here, and
//! the message says which line is missing where.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repository().join(relative))
        .unwrap_or_else(|error| panic!("{relative}: {error}"))
}

/// `snapview ARGS --help`, the long form (one option per line, its `[env: ...]` below it).
fn help(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_snapview"))
        .args(args)
        .arg("--help")
        .output()
        .expect("snapview runs");
    assert!(output.status.success(), "snapview {args:?} --help failed");
    String::from_utf8(output.stdout).expect("the help is UTF-8")
}

/// The subcommands `snapview --help` lists (but `help`).
fn subcommands() -> Vec<String> {
    let top = help(&[]);
    let listed = top
        .split("Commands:\n")
        .nth(1)
        .expect("`snapview --help` lists its commands");
    listed
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// A flag of a `--help`, and the environment variable it reads, if any.
#[derive(Debug)]
struct Flag {
    long: String,
    env: Option<String>,
}

/// The flags of one `--help` text, but `--help` and `--version`. clap puts an option's line at
/// two spaces (`-o, --output`) or six (`--output`), its description deeper.
fn flags_of(help: &str) -> Vec<Flag> {
    let mut flags: Vec<Flag> = Vec::new();
    for line in help.lines() {
        let option = line
            .strip_prefix("  ")
            .and_then(|rest| {
                rest.strip_prefix("    ").or_else(|| {
                    // `-o, --output`: a short flag first.
                    let short = rest.strip_prefix('-')?;
                    let mut chars = short.chars();
                    chars.next().filter(char::is_ascii_alphabetic)?;
                    chars.as_str().strip_prefix(", ")
                })
            })
            .and_then(|rest| rest.strip_prefix("--"));
        if let Some(option) = option {
            let name: String = option
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            flags.push(Flag {
                long: format!("--{name}"),
                env: None,
            });
        }
        // The variable is on the option's line (short help) or below it (long help).
        if let Some(env) = line.split("[env: ").nth(1)
            && let Some(flag) = flags.last_mut()
        {
            let name: String = env
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            flag.env = Some(name);
        }
    }
    flags.retain(|flag| flag.long != "--help" && flag.long != "--version");
    flags
}

/// The cells of a Markdown table row (`\|` inside a cell is not a separator).
fn cells(row: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    let mut escaped = false;
    for c in row.trim().trim_start_matches('|').chars() {
        match c {
            '|' if !escaped => cells.push(String::new()),
            _ => cells.last_mut().expect("a cell").push(c),
        }
        escaped = c == '\\';
    }
    cells
}

/// The rows of README.md's flag tables, by the flags their first cell names.
fn readme_flag_rows(readme: &str) -> Vec<(Vec<String>, String)> {
    readme
        .lines()
        .filter(|line| line.starts_with('|'))
        .filter_map(|row| {
            let first = cells(row).into_iter().next()?;
            let named: Vec<String> = first
                .split('`')
                .skip(1)
                .step_by(2)
                .filter_map(|code| code.split_whitespace().next())
                .filter(|word| word.starts_with("--"))
                .map(str::to_owned)
                .collect();
            (!named.is_empty()).then(|| (named, row.to_owned()))
        })
        .collect()
}

#[test]
fn every_flag_of_every_command_is_in_the_readme() {
    let readme = read("README.md");
    let rows = readme_flag_rows(&readme);
    let mut commands: Vec<Vec<String>> = vec![Vec::new()];
    commands.extend(subcommands().into_iter().map(|name| vec![name]));
    assert!(commands.len() >= 8, "too few subcommands: {commands:?}");
    let mut missing = BTreeSet::new();
    let mut checked = 0;
    for command in &commands {
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        let shown = format!("snapview {}", args.join(" "));
        for flag in flags_of(&help(&args)) {
            checked += 1;
            let documented: Vec<&String> = rows
                .iter()
                .filter(|(named, _)| named.contains(&flag.long))
                .map(|(_, row)| row)
                .collect();
            if documented.is_empty() {
                missing.insert(format!(
                    "{} (`{shown} --help`): no row of a README.md flag table names it in its first cell",
                    flag.long
                ));
            } else if let Some(env) = &flag.env
                && !documented.iter().any(|row| row.contains(env.as_str()))
            {
                missing.insert(format!(
                    "{} (`{shown} --help`) reads {env}, which no README.md row of it names",
                    flag.long
                ));
            }
        }
    }
    assert!(checked >= 40, "only {checked} flags found in the help");
    assert!(
        missing.is_empty(),
        "README.md's flag tables miss:\n  {}",
        missing.into_iter().collect::<Vec<_>>().join("\n  ")
    );
}

/// The text of the call whose `(` is at the start of `text`, up to its matching `)`.
fn call_arguments(text: &str) -> &str {
    let mut depth = 0;
    for (at, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &text[..=at];
                }
            }
            _ => {}
        }
    }
    text
}

/// A route the server registers: its methods (empty for a service, which takes any), its
/// path, and the file that registers it.
#[derive(Debug)]
struct Route {
    methods: Vec<&'static str>,
    path: String,
    file: String,
}

/// The routes registered under src/server: each `.route("PATH", get(..).post(..)..)`, and each
/// `.route_service`, `.nest` or `.nest_service` by its path.
fn registered_routes() -> Vec<Route> {
    const METHODS: [(&str, &str); 6] = [
        ("get(", "GET"),
        ("post(", "POST"),
        ("put(", "PUT"),
        ("patch(", "PATCH"),
        ("delete(", "DELETE"),
        ("head(", "HEAD"),
    ];
    let mut routes = Vec::new();
    let mut files = common::served::files_under(&repository().join("src/server"));
    files.retain(|file| file.extension().is_some_and(|x| x == "rs"));
    files.sort();
    for file in files {
        let source = std::fs::read_to_string(&file).expect("source");
        let file = file
            .strip_prefix(repository())
            .expect("inside")
            .display()
            .to_string();
        for call in [".route(", ".route_service(", ".nest(", ".nest_service("] {
            for (at, _) in source.match_indices(call) {
                let arguments = call_arguments(&source[at + call.len() - 1..]);
                let Some(path) = arguments.split('"').nth(1) else {
                    continue;
                };
                let methods = if call == ".route(" {
                    METHODS
                        .iter()
                        .filter(|(name, _)| {
                            arguments.match_indices(name).any(|(i, _)| {
                                // A whole word: `get(`, not `target(`.
                                !arguments[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_')
                            })
                        })
                        .map(|(_, method)| *method)
                        .collect()
                } else {
                    Vec::new()
                };
                routes.push(Route {
                    methods,
                    path: path.to_owned(),
                    file: file.clone(),
                });
            }
        }
    }
    routes
}

#[test]
fn every_route_of_the_server_is_in_docs_api_md() {
    let docs = read("docs/api.md");
    let routes = registered_routes();
    assert!(
        routes.len() >= 25,
        "only {} routes found under src/server: has the router moved?\n{routes:#?}",
        routes.len()
    );
    let mut missing = Vec::new();
    for route in &routes {
        if route.methods.is_empty() && route.path.starts_with('/') {
            if !docs.contains(&route.path) {
                missing.push(format!("{} (a service, {})", route.path, route.file));
            }
            continue;
        }
        assert!(
            !route.methods.is_empty(),
            "{} ({}): no method found; teach this test the router's new form",
            route.path,
            route.file
        );
        for method in &route.methods {
            let line = format!("`{method} {}`", route.path);
            if !docs.contains(&line) {
                missing.push(format!("{line} ({})", route.file));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/api.md does not document these routes (a row of its Endpoints or Pages table):\n  {}",
        missing.join("\n  ")
    );
}

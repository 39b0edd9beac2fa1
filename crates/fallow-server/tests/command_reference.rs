//! docs/commands.md is generated from the command table, so the reference can never drift from the code.
//! Regenerate with `FALLOW_UPDATE_DOCS=1 cargo test -p fallow-server --test command_reference`.
use fallow_server::command::info::{flags, groups, table, Keys};

fn render() -> String {
    let mut text = String::from(
        "# Command reference (RESP)\n\nGenerated from the command table (`crates/fallow-server/src/command/`) by \
         `FALLOW_UPDATE_DOCS=1 cargo test -p fallow-server --test command_reference`; a test fails when this file \
         is stale. Semantics and error replies follow Redis 7.0. Arity counts the command name; -N means at \
         least N. The memcached protocols are described in `docs/memcached.md`.\n",
    );
    for group in groups() {
        let title = group.title;
        let mut commands: Vec<_> = table().iter().filter(|spec| spec.group == group).collect();
        if commands.is_empty() {
            continue;
        }
        commands.sort_by_key(|spec| spec.name);
        text.push_str(&format!(
            "\n## {title}\n\n| command | arity | flags | keys | summary |\n|---|---|---|---|---|\n"
        ));
        for spec in commands {
            let names: Vec<&str> = flags::NAMES
                .iter()
                .filter(|(flag, _)| spec.flags & flag != 0)
                .map(|(_, name)| *name)
                .collect();
            let keys = match spec.keys {
                Keys::None => "-".to_string(),
                Keys::All => "all".to_string(),
                Keys::Range { first, last, step } => format!("{first}..{last} step {step}"),
                Keys::Custom(_) => "computed".to_string(),
                Keys::CustomOrAll { .. } => "computed; all with patterns".to_string(),
            };
            text.push_str(&format!(
                "| `{}` | {} | {} | {} | {} |\n",
                spec.name.to_uppercase(),
                spec.arity,
                names.join(", "),
                keys,
                spec.summary
            ));
        }
    }
    text
}

#[test]
fn command_reference_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/commands.md");
    let rendered = render();
    if std::env::var_os("FALLOW_UPDATE_DOCS").is_some() {
        std::fs::write(path, &rendered).expect("write docs/commands.md");
        return;
    }
    let current = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        current == rendered,
        "docs/commands.md is stale: run FALLOW_UPDATE_DOCS=1 cargo test -p fallow-server --test command_reference"
    );
}

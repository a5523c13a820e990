//! `exec`'s and `elect`'s operands: the keys, then the command to run, as flock takes them.

use std::ffi::OsString;

/// The operands as keys and a command: before the first `--` the keys and after it the
/// command; without a `--`, as flock, the first operand is the key and the rest the command
/// (whose own `--`, if it needs one, then follows a `--` of exec's). An operand in the
/// keys that looks like an option was meant as one, and is refused with that said.
pub fn split(operands: &[OsString]) -> Result<(Vec<String>, Vec<OsString>), String> {
    let (keys, command) = match operands.iter().position(|o| o == "--") {
        Some(at) => (&operands[..at], &operands[at + 1..]),
        None => operands.split_at(operands.len().min(1)),
    };
    if keys.is_empty() {
        return Err("no KEY before `--`".into());
    }
    if command.is_empty() {
        return Err("no COMMAND to run".into());
    }
    // Without `--`, a "command" that looks like an option was meant as one (flock would
    // try to run it): refused, with where options go said.
    if keys.len() + command.len() == operands.len()
        && let Some(word) = command[0].to_str().filter(|w| w.starts_with('-'))
    {
        return Err(format!(
            "{word:?} after the KEY: options go before the KEY (a command that starts \
                 with `-` goes after `--`)"
        ));
    }
    let keys = keys
        .iter()
        .map(|key| match key.to_str() {
            Some(key) if key.len() > 1 && key.starts_with('-') => Err(format!(
                "{key:?} among the keys: options go before the first KEY"
            )),
            Some(key) => Ok(key.to_owned()),
            None => Err(format!("{key:?}: a key must be UTF-8 text")),
        })
        .collect::<Result<_, _>>()?;
    Ok((keys, command.to_vec()))
}

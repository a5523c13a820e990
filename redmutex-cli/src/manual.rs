//! `redmutex completions SHELL` and `redmutex man [SUBCOMMAND]`: shell completions and
//! manual pages generated from the command line's own definition, so that they always
//! describe the binary that prints them (no build step, nothing to keep in step).

use crate::exit::{self, Failure};
use crate::output::{self, outln};

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_name = "SHELL")]
    shell: clap_complete::Shell,
}

#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// The subcommand whose page to print (`redmutex-exec(1)`), instead of redmutex's.
    #[arg(value_name = "SUBCOMMAND")]
    subcommand: Option<String>,
}

/// Prints the completion script for the shell, of `cli`: redmutex's whole command line.
pub fn completions(args: &CompletionsArgs, mut cli: clap::Command) -> Result<u8, Failure> {
    output::check_stdout_open(output::ANSWER_LOST)?;
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cli, "redmutex", &mut script);
    print_bytes(&script)
}

/// Prints the manual page (roff) of redmutex or of one of its subcommands, from `cli`:
/// redmutex's whole command line.
pub fn man(args: &ManArgs, mut top: clap::Command) -> Result<u8, Failure> {
    output::check_stdout_open(output::ANSWER_LOST)?;
    top.build();
    let page = match args.subcommand.as_deref() {
        None => top,
        Some(name) => {
            let found = top
                .get_subcommands()
                .find(|c| c.get_name() == name && !c.is_hide_set());
            let Some(sub) = found.cloned() else {
                return Err(Failure::usage(format!(
                    "no subcommand {name:?} to print a page of"
                )));
            };
            let version = top.get_version().unwrap_or_default().to_owned();
            sub.name(format!("redmutex-{name}")).version(version)
        }
    };
    let mut roff = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut roff)
        .map_err(|e| Failure::new(exit::IO_ERROR, format!("cannot render the page: {e}")))?;
    print_bytes(&roff)
}

/// Writes `bytes` to stdout whole (74 when it cannot be written, as every command).
fn print_bytes(bytes: &[u8]) -> Result<u8, Failure> {
    let text = String::from_utf8_lossy(bytes);
    outln!("{}", text.trim_end_matches('\n'))?;
    Ok(0)
}

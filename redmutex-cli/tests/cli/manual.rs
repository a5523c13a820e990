//! `redmutex completions` and `redmutex man`.

use std::process::Command;

use crate::common::*;

/// Shell completions and manual pages come from the command line's own definition: every
/// shell's script names the subcommands and their options (bash's parses), and `man`
/// prints roff pages of redmutex and of each subcommand; neither needs Redis.
#[test]
fn completions_and_manual_pages_describe_the_command_line() {
    let bin = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_redmutex"));
        cmd.env("REDMUTEX_REDIS", "redis://127.0.0.1:1");
        cmd
    };
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run(bin().args(["completions", shell]));
        assert_eq!(code(&out), 0, "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        for word in ["exec", "completions", "limit", "wait-redis"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    let dir = scratch("completions");
    let script = dir.join("redmutex.bash");
    std::fs::write(&script, stdout(&run(bin().args(["completions", "bash"])))).unwrap();
    let parsed = run(Command::new("bash").arg("-n").arg(&script));
    assert_eq!(code(&parsed), 0, "{}", stderr(&parsed));
    let out = run(bin().args(["completions", "tcsh"]));
    assert_eq!(code(&out), 64, "{}", stderr(&out));

    let page = stdout(&run(bin().arg("man")));
    assert!(page.contains(".TH redmutex 1"), "{page}");
    for subcommand in ["exec", "acquire", "list", "doctor"] {
        assert!(page.contains(&format!("redmutex\\-{subcommand}")), "{page}");
        let out = run(bin().args(["man", subcommand]));
        assert_eq!(code(&out), 0, "{subcommand}: {}", stderr(&out));
        let title = format!(".TH redmutex-{subcommand} 1");
        assert!(stdout(&out).contains(&title), "{}", stdout(&out));
    }
    let exec = stdout(&run(bin().args(["man", "exec"])));
    assert!(
        exec.contains("KEY COMMAND [ARGS]") && exec.contains("\\-\\-limit"),
        "{exec}"
    );
    let out = run(bin().args(["man", "nope"]));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
}

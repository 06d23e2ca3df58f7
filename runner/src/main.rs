//! The `ralph` binary: dispatches to the sandbox helper or the container init (before anything else, while the
//! process is single-threaded) or to the command line.

mod cli;

fn main() -> std::process::ExitCode {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == ralph_sandbox::native::HELPER_ARG)
    {
        ralph_sandbox::native::helper_main();
    }
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == ralph_sandbox::native::protocol::ZYGOTE_ARG)
    {
        ralph_sandbox::native::zygote_main();
    }
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == ralph_sandbox::docker::init::INIT_ARG)
    {
        ralph_sandbox::docker::init::init_main();
    }
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == ralph_runner::builtin::entry::ARG)
    {
        return ralph_runner::builtin::entry::main(std::env::args_os().skip(2).collect());
    }
    cli::main()
}

//! The `ctxsync` command line: parses arguments and dispatches to the library's commands.
//! Every failure ends as one clear line on stderr and a non-zero exit, never a backtrace.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// `ctxsync --version`: the version, then the notices of what the binary carries.
static LONG_VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{}\n\n{} Its full notice: crates/ctxsync-chat-projection/model/NOTICE in the source.",
        env!("CARGO_PKG_VERSION"),
        ctxsync_chat_projection::MODEL_NOTICE
    )
});

#[derive(Debug, Parser)]
#[command(
    name = "ctxsync",
    version,
    long_version = LONG_VERSION.as_str(),
    about = "Tells an AI chat whether a workspace agent has finished discovering its MCP servers, \
             and whether the tools it sees come from the agent process running now."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How log lines on stderr are written: `text`, or `json` (one object per line).
    #[arg(
        long,
        global = true,
        env = "CTXSYNC_LOG_FORMAT",
        value_enum,
        default_value_t = ctxsync::logging::LogFormat::Text
    )]
    log_format: ctxsync::logging::LogFormat,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the control plane: the agent API (gRPC) and the chat API with the web page (HTTP).
    // Boxed: its many flags would make every other command as large.
    Server(Box<ctxsync::server::ServerArgs>),
    /// Manage workspace agents in the database.
    Agents {
        #[command(subcommand)]
        command: AgentsCommand,
    },
    /// Run a workspace agent: discover MCP servers and publish to the agent API (gRPC).
    #[command(long_about = ctxsync::agent::LONG_ABOUT)]
    Agent(ctxsync::agent::AgentArgs),
    /// Discover the workspace's MCP servers locally and print the report (no server needed).
    #[command(long_about = ctxsync::discover::LONG_ABOUT)]
    Discover(ctxsync::discover::DiscoverArgs),
    /// Manage chats through a running server's chat API (HTTP).
    Chats {
        #[command(subcommand)]
        command: ChatsCommand,
    },
    /// Prepare a chat's turn through the chat API (HTTP) and print its tools.
    Turn(ctxsync::chats::TurnArgs),
    /// Print a one-time link (a full URL) to a chat's web page, from the chat API (HTTP).
    Link(ctxsync::chats::LinkArgs),
    /// Print a chat's context panel in the terminal, from the chat API (HTTP).
    Context(ctxsync::context::ContextArgs),
    /// Call one of a chat turn's tools through the chat API (HTTP) and print what the model
    /// is handed.
    Call(ctxsync::http::tool_call::call_command::CallArgs),
    /// List the tool-call audit log from the chat API (HTTP): one row per call end, newest
    /// first.
    Calls(ctxsync::http::tool_call::list_command::CallsArgs),
    /// Run the whole system on this machine: server, agent, MCP servers, a chat's first turn.
    Demo(ctxsync::demo::DemoArgs),
    /// Print a shell completion script, e.g. `ctxsync completions bash > /etc/bash_completion.d/ctxsync`.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Serve a scriptable MCP server (used by the demo's workspace).
    #[command(hide = true, disable_help_flag = true)]
    McpFixture {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum ChatsCommand {
    /// Create a chat bound to an agent and print its id.
    Create(ctxsync::chats::CreateChatArgs),
}

#[derive(Debug, Subcommand)]
enum AgentsCommand {
    /// Create an agent and print its id and token (the token is shown only once).
    Create(ctxsync::agents::CreateArgs),
    /// List the agents (never their tokens).
    List(ctxsync::agents::ListArgs),
    /// Replace an agent's token and print the new one once; the old one is refused at once.
    Rotate(ctxsync::agents::IdArgs),
    /// Delete an agent with its snapshot; its token is refused at once.
    Delete(ctxsync::agents::IdArgs),
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        // Help and version go to stdout as asked; a usage error is logged like any other
        // failure when JSON logs were asked for.
        Err(error) if error.use_stderr() && ctxsync::logging::json_requested(&args) => {
            ctxsync::logging::init(ctxsync::logging::LogFormat::Json);
            ctxsync::logging::fatal(error.render().to_string().trim_end());
            return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2));
        }
        Err(error) => error.exit(),
    };
    match cli.command {
        Command::McpFixture { args } => return run_fixture(args),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "ctxsync", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    // `discover` prints a report: the MCP SDK's own lines only with its `--verbose`.
    let sdk_logs = !matches!(&cli.command, Command::Discover(args) if !args.verbose);
    ctxsync::logging::init_for(cli.log_format, sdk_logs);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            ctxsync::logging::fatal(&format!("error: cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Server(args) => ctxsync::server::run(*args).await,
            Command::Agents { command } => match command {
                AgentsCommand::Create(args) => ctxsync::agents::create(args).await,
                AgentsCommand::List(args) => ctxsync::agents::list(args).await,
                AgentsCommand::Rotate(args) => ctxsync::agents::rotate(args).await,
                AgentsCommand::Delete(args) => ctxsync::agents::delete(args).await,
            },
            Command::Agent(args) => ctxsync::agent::run(args).await,
            Command::Discover(args) => ctxsync::discover::run(args).await,
            Command::Chats { command } => match command {
                ChatsCommand::Create(args) => ctxsync::chats::create(args).await,
            },
            Command::Turn(args) => ctxsync::chats::turn(args).await,
            Command::Link(args) => ctxsync::chats::link(args).await,
            Command::Context(args) => ctxsync::context::run(args).await,
            Command::Call(args) => ctxsync::http::tool_call::call_command::run(args).await,
            Command::Calls(args) => ctxsync::http::tool_call::list_command::run(args).await,
            Command::Demo(args) => ctxsync::demo::run(args).await,
            Command::McpFixture { .. } | Command::Completions { .. } => {
                unreachable!("handled before the runtime starts")
            }
        }
    });
    // Child processes and connections are torn down promptly rather than waited for.
    runtime.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            ctxsync::logging::fatal(&format!("error: {error:#}"));
            ExitCode::FAILURE
        }
    }
}

fn run_fixture(args: Vec<String>) -> ExitCode {
    match ctxsync_mcp_fixture::FixtureConfig::from_args(args) {
        Ok(config) => match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime.block_on(ctxsync_mcp_fixture::run_process(config)),
            Err(e) => {
                eprintln!("error: cannot start the async runtime: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => e.exit(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--help` shows a subcommand's long text, `-h` its one line.
    #[test]
    fn agent_and_discover_help_show_their_long_text() {
        let mut cli = <Cli as clap::CommandFactory>::command();
        for (name, sentence) in [
            ("agent", "Runs until Ctrl-C or SIGTERM."),
            (
                "discover",
                "--allow-failures exits 0 whatever the outcomes.",
            ),
        ] {
            let command = cli.find_subcommand_mut(name).expect("a subcommand");
            let long = command.render_long_help().to_string();
            assert!(long.contains(sentence), "{name} --help:\n{long}");
            let short = command.render_help().to_string();
            assert!(!short.contains(sentence), "{name} -h:\n{short}");
        }
    }
}

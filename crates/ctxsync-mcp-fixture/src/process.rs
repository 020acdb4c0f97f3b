//! Process mode: what the binary does around the server (pid file, scripted exits, stderr).

use std::{io::Write, process::ExitCode};

use rmcp::ServiceExt;

use crate::{
    config::{FixtureConfig, FixtureLifecycle, FixtureTransport},
    scripted_exit::should_exit,
    server::FixtureServer,
    silent::{DropRequests, Dropped},
};

/// Runs the fixture as a process until its client disconnects (stdio) or it is killed (HTTP).
pub async fn run_process(config: FixtureConfig) -> ExitCode {
    let server = FixtureServer::with_mode(config.clone(), true);
    eprintln!(
        "ctxsync-mcp-fixture pid={} nonce={}",
        std::process::id(),
        server.nonce()
    );
    if let Some(path) = config.start_log_path()
        && let Err(error) = append_start(path)
    {
        eprintln!("ctxsync-mcp-fixture: cannot write the start log: {error}");
        return ExitCode::FAILURE;
    }
    if let Some(path) = config.pid_file_path()
        && let Err(error) = std::fs::write(path, std::process::id().to_string())
    {
        eprintln!("ctxsync-mcp-fixture: cannot write pid file: {error}");
        return ExitCode::FAILURE;
    }
    if config.stderr_flood_value() > 0 {
        flood_stderr(config.stderr_flood_value());
    }
    if let Some(secret) = config.stderr_secret_value()
        && should_exit(&config)
    {
        eprintln!("ctxsync-mcp-fixture: failing on purpose; secret={secret}");
        std::process::exit(config.exit_code_value());
    }
    if config.exits_on_start() && should_exit(&config) {
        std::process::exit(config.exit_code_value());
    }
    if let Some((kind, huge_line_bytes)) = config.malformed_stdout_value()
        && config.transport() == FixtureTransport::Stdio
    {
        let run = move || crate::malformed::run(kind, huge_line_bytes);
        return tokio::task::spawn_blocking(run)
            .await
            .unwrap_or(ExitCode::FAILURE);
    }

    // Nothing is read meanwhile: requests wait in the pipe, as with a server that loads.
    tokio::time::sleep(config.start_delay_value()).await;
    match config.transport() {
        FixtureTransport::Stdio => match serve_stdio(server, &config).await {
            Ok(running) => {
                // The loop ends when the client closes stdin; that is a normal end.
                let _ = running.waiting().await;
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("ctxsync-mcp-fixture: initialize failed: {error}");
                ExitCode::FAILURE
            }
        },
        FixtureTransport::Http => match crate::http::serve(server).await {
            Ok(fixture) => {
                let mut stdout = std::io::stdout().lock();
                // The parent reads this line to learn the port.
                let printed = writeln!(stdout, "{}", fixture.url()).and_then(|()| stdout.flush());
                drop(stdout);
                if let Err(error) = printed {
                    eprintln!("ctxsync-mcp-fixture: cannot print the address: {error}");
                    return ExitCode::FAILURE;
                }
                std::future::pending::<()>().await;
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("ctxsync-mcp-fixture: cannot listen: {error}");
                ExitCode::FAILURE
            }
        },
    }
}

async fn serve_stdio(
    server: FixtureServer,
    config: &FixtureConfig,
) -> Result<
    rmcp::service::RunningService<rmcp::RoleServer, FixtureServer>,
    rmcp::service::ServerInitializeError,
> {
    let (stdin, stdout) = rmcp::transport::stdio();
    let transport = rmcp::transport::async_rw::AsyncRwTransport::new_server(stdin, stdout);
    let dropped = Dropped {
        discover: config.lifecycle_value() == FixtureLifecycle::Silent,
        listen: config.ignores_listen(),
        empty_discover: config.lifecycle_value() == FixtureLifecycle::Lenient,
    };
    if dropped == Dropped::default() {
        server.serve(transport).await
    } else {
        let inner = transport;
        server.serve(DropRequests { inner, dropped }).await
    }
}

fn append_start(path: &std::path::Path) -> std::io::Result<()> {
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    writeln!(log, "{}", std::process::id())
}

fn flood_stderr(bytes: usize) {
    let line = [b'x'; 1023];
    let mut stderr = std::io::stderr().lock();
    let mut left = bytes;
    while left > 0 {
        let chunk = left.min(1024);
        let mut buf = line[..chunk.saturating_sub(1)].to_vec();
        buf.push(b'\n');
        if stderr.write_all(&buf).is_err() {
            return;
        }
        left -= chunk;
    }
}

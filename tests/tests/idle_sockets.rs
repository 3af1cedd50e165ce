//! Sockets that open and say nothing cannot lock a server: the real replay server, limited to
//! 256 open files, is flooded with 300 TCP connections that send nothing (a third of them half
//! an HTTP/2 preface) and are never closed by their peer; `fleetrl health` and a real client
//! are still served, and the server closes the silent sockets itself.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fleetrl_proto::v1::replay_service_client::ReplayServiceClient;
use fleetrl_proto::v1::InfoRequest;
use fleetrl_runtime::launch::Role;
use fleetrl_tests::cli::fleetrl_command;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Far more than the server's 10 s handshake deadline, on a loaded 2-core machine.
const BUDGET: Duration = Duration::from_secs(90);
const SILENT_SOCKETS: usize = 300;
const OPEN_FILES: u64 = 256;

/// Sets the soft and hard limit on open files of process `pid`.
fn limit_open_files(pid: u32, n: u64) -> anyhow::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: prlimit reads the struct we pass and writes nothing (old_limit is null).
    let rc = unsafe {
        libc::prlimit(
            pid as i32,
            libc::RLIMIT_NOFILE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    anyhow::ensure!(rc == 0, "prlimit: {}", std::io::Error::last_os_error());
    Ok(())
}

/// `n` connections to `addr`; every third sends the first 16 bytes of a preface. Connections
/// the kernel does not take (a full backlog) are left out.
async fn silent_sockets(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut sockets = Vec::new();
    for i in 0..n {
        let connect = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr));
        let Ok(Ok(mut socket)) = connect.await else {
            continue;
        };
        if i % 3 == 0 {
            let _ = socket.write_all(b"PRI * HTTP/2.0\r\n").await;
        }
        sockets.push(socket);
    }
    sockets
}

/// Runs `fleetrl health` until it succeeds; the seconds it took.
fn health_within(addr: SocketAddr, budget: Duration) -> anyhow::Result<f64> {
    let started = Instant::now();
    loop {
        let run = fleetrl_command(&["health", &addr.to_string(), "--timeout-s", "3"]).output()?;
        if run.status.success() {
            return Ok(started.elapsed().as_secs_f64());
        }
        anyhow::ensure!(
            started.elapsed() < budget,
            "`fleetrl health` failed for {budget:?} while silent sockets were open: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
}

/// Whether the server closes `socket` (reads, past the server's SETTINGS frame, see the end
/// or an error) before `deadline`.
async fn closed_by_server(socket: &mut TcpStream, deadline: tokio::time::Instant) -> bool {
    let mut sink = [0u8; 256];
    loop {
        match tokio::time::timeout_at(deadline, socket.read(&mut sink)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_do_not_lock_out_clients() -> anyhow::Result<()> {
    let dir = fleetrl_tests::scratch("fleetrl-silent-sockets");
    std::fs::create_dir_all(&dir)?;
    let log = dir.join("replay-server.log");
    let args = ["--listen".to_string(), "127.0.0.1:0".to_string()];
    let mut replay = Role::start("replay-server", "fleet-replay-server", &args, &log).await?;
    let addr = replay.listening_addr(BUDGET, &log).await?;
    limit_open_files(replay.pid().expect("running"), OPEN_FILES)?;

    let mut sockets = silent_sockets(addr, SILENT_SOCKETS).await;
    let took = tokio::task::spawn_blocking(move || health_within(addr, BUDGET)).await??;
    eprintln!(
        "health answered {took:.1} s after {} silent sockets",
        sockets.len()
    );

    let channel = fleetrl_runtime::net::connect(&addr.to_string(), BUDGET).await?;
    let info = ReplayServiceClient::new(channel).info(InfoRequest {}).await;
    anyhow::ensure!(info.is_ok(), "a replay client was refused: {info:?}");

    let deadline = tokio::time::Instant::now() + BUDGET;
    let mut closed = 0;
    for socket in &mut sockets {
        closed += usize::from(closed_by_server(socket, deadline).await);
    }
    anyhow::ensure!(
        closed == sockets.len(),
        "the server closed {closed} of {} silent sockets; log in {}",
        sockets.len(),
        log.display()
    );
    anyhow::ensure!(replay.exited().is_none(), "the replay server exited");
    Ok(())
}

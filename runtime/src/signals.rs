//! The stop a process is asked for: SIGTERM (compose, Kubernetes, `fleetrl train` stopping its
//! roles, `kill`, `timeout`) or Ctrl-C (SIGINT).
//!
//! Every role (learner, actor, replay and policy server) listens from the first line of its
//! `run` to its exit ([`Signals::listen`]), and each wait asks the one listener; the launcher
//! listens once its roles have started. Two reasons for that shape:
//! - a container's main process is PID 1, which ignores a signal it has no handler for, so a
//!   SIGTERM that arrives before a handler exists is lost and the orchestrator waits out its
//!   stop grace (the compose files also run the roles under docker's init, for the instants
//!   before `main`, while libtorch loads);
//! - tokio's handler, once installed, stays for the life of the process, but a signal reaches
//!   only the listeners that exist when it arrives: one that lands between two waits (say,
//!   after startup's wait and before serving's) would neither kill the process nor be heard.

use tokio::sync::watch;

/// The count of SIGTERMs and Ctrl-Cs this process has received since [`Signals::listen`];
/// clones share it.
#[derive(Debug, Clone)]
pub struct Signals(watch::Receiver<u32>);

impl Signals {
    /// Installs the handlers now and counts every signal from here on. Call it first thing,
    /// inside the tokio runtime.
    pub fn listen() -> std::io::Result<Signals> {
        let (tx, rx) = watch::channel(0);
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let mut sigint = signal(SignalKind::interrupt())?;
            let mut sigterm = signal(SignalKind::terminate())?;
            tokio::spawn(async move {
                loop {
                    let got = tokio::select! {
                        got = sigint.recv() => got,
                        got = sigterm.recv() => got,
                    };
                    if got.is_none() {
                        break;
                    }
                    tx.send_modify(|n| *n += 1);
                }
            });
        }
        #[cfg(not(unix))]
        tokio::spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                tx.send_modify(|n| *n += 1);
            }
        });
        Ok(Signals(rx))
    }

    /// Resolves once `n` signals have arrived in all, at once if they already have; never if
    /// the listener is gone (the runtime is shutting down).
    pub async fn received(&self, n: u32) {
        let mut rx = self.0.clone();
        if rx.wait_for(|&got| got >= n).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves at the first signal: the stop.
    pub async fn stop(&self) {
        self.received(1).await;
    }

    /// `work`'s output, unless the stop comes first: then `None`, and `work` is dropped. For
    /// what a process waits on before it has anything to finish (a peer at startup).
    pub async fn before_stop<F: std::future::Future>(&self, work: F) -> Option<F::Output> {
        tokio::select! {
            out = work => Some(out),
            () = self.stop() => None,
        }
    }

    /// Signals received so far.
    pub fn count(&self) -> u32 {
        *self.0.borrow()
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A signal that arrives while nothing waits is still heard by the next wait.
    #[tokio::test]
    async fn a_signal_between_waits_is_kept_for_the_next() {
        let signals = Signals::listen().unwrap();
        assert_eq!(signals.count(), 0);
        // SAFETY: raise only sends a signal to this process, whose handler is installed above.
        assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
        let heard = tokio::time::timeout(Duration::from_secs(10), signals.stop()).await;
        assert!(heard.is_ok(), "the SIGTERM was not heard");
        assert_eq!(signals.count(), 1);
        // Already received: a later wait resolves at once, a wait for a second one does not.
        tokio::time::timeout(Duration::from_secs(1), signals.clone().stop())
            .await
            .expect("a second wait on the same stop resolves at once");
        let second = tokio::time::timeout(Duration::from_millis(200), signals.received(2)).await;
        assert!(second.is_err(), "no second signal was sent");
    }
}

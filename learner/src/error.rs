//! The learner's errors, and the one place they become gRPC statuses.

use fleetrl_core::broadcast::BroadcastError;
use fleetrl_core::checkpoint::CheckpointError;
use fleetrl_core::models::ModelError;
use tonic::Status;

/// What can go wrong serving the learner or running its trainer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LearnerError {
    /// The model's weights could not be exported for publication.
    #[error("cannot export the weights: {0}")]
    Export(#[from] ModelError),
    /// A checkpoint could not be written.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The trainer thread is gone (it failed; the learner is exiting).
    #[error("the trainer has stopped")]
    TrainerStopped,
    /// An episode report whose columns disagree.
    #[error("returns has {returns} entries but lengths has {lengths}")]
    BadReport {
        /// Entries in `returns`.
        returns: usize,
        /// Entries in `lengths`.
        lengths: usize,
    },
    /// An episode report with a value no real episode has.
    #[error("episode report rejected: {0}")]
    ImplausibleReport(String),
    /// A run-time parameter change that cannot be made (`fleetrl set`): the key cannot change,
    /// the value is out of range, or the algorithm keeps its hyperparameters.
    #[error("{0}")]
    BadParameter(String),
    /// The chunked weight stream failed.
    #[error(transparent)]
    Broadcast(#[from] BroadcastError),
    /// Asked of a learner rank other than 0, which neither checkpoints nor bootstraps actors.
    #[error(
        "learner rank {0} does not lead its group (learner.world_size > 1): rank 0 writes the \
         checkpoints and serves actors their run spec and weights; ask rank 0"
    )]
    NotLeader(u32),
}

impl From<LearnerError> for Status {
    fn from(error: LearnerError) -> Status {
        let message = error.to_string();
        match error {
            LearnerError::BadReport { .. }
            | LearnerError::ImplausibleReport(_)
            | LearnerError::BadParameter(_) => Status::invalid_argument(message),
            LearnerError::NotLeader(_) => Status::failed_precondition(message),
            LearnerError::TrainerStopped | LearnerError::Broadcast(BroadcastError::Stalled(_)) => {
                Status::unavailable(message)
            }
            LearnerError::Export(_) | LearnerError::Checkpoint(_) | LearnerError::Broadcast(_) => {
                Status::internal(message)
            }
        }
    }
}

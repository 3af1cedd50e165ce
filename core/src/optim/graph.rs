//! CUDA graphs of learner updates (`learner.cuda_graph`).
//!
//! An update of a small network on a GPU is a few hundred tiny kernels, each launched from
//! the host: the GPU waits on the launches, not on the arithmetic. A CUDA graph records those
//! launches once and replays them with one call. [`UpdateGraph::run`] runs an update's device
//! work eagerly on a side stream for the first [`WARM_UP`] updates (libtorch and cuBLAS set
//! themselves up lazily on first use, which a capture must not see), then captures it once
//! per variant (e.g. with and without the target network's update) into a graph that reads
//! its inputs from tensors of its own, and from then on copies each batch into those tensors
//! and replays the graph.
//!
//! What a captured step may do: only device work on tensors whose storage outlives the graph
//! (parameters, optimiser state, the graph's inputs), updated in place. No host reads
//! (`double_value`, `Vec::try_from`), no host-side counters or learning rates that change
//! between updates (they would be frozen at their captured values: see
//! [`super::Adam::count_on_device`]), and no host branches on data. Random ops draw fresh
//! numbers on every replay (libtorch registers its default CUDA generator with the graph).
//! Everything an update reads back goes in its returned tensors and is read after the replay.

use tch::{Device, Tensor};

/// A batch an update graph copies into tensors of its own: its tensors in a fixed order, and a
/// batch over tensors in that order.
pub trait GraphBatch {
    /// Its tensors, in the order [`GraphBatch::from_fields`] reads.
    fn fields(&self) -> Vec<&Tensor>;
    /// A batch over `fields` (handles on the same storage).
    fn from_fields(fields: &[Tensor]) -> Self;
}

/// Updates run eagerly on the side stream before the first capture.
pub const WARM_UP: u32 = 3;

/// Why a CUDA graph could not be made or run.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// libtorch refused a call (the message is libtorch's).
    #[error(
        "CUDA graph of the update: {what} failed: {message} (set learner.cuda_graph = false \
         to update without graphs)"
    )]
    Cuda {
        /// The call.
        what: &'static str,
        /// libtorch's message.
        message: String,
    },
}

/// One update's device work, captured and replayed (see the module docs). The default runs
/// every update as written.
#[derive(Debug, Default)]
pub struct UpdateGraph {
    state: State,
}

#[derive(Debug, Default)]
enum State {
    /// Every update runs as it is written (the CPU, or graphs off).
    #[default]
    Eager,
    /// Warming up, then capturing and replaying.
    On {
        stream: ffi::SideStream,
        warm_up_left: u32,
        /// One graph per variant of the update, with the tensors it reads and returns.
        graphs: Vec<Captured>,
    },
}

#[derive(Debug)]
struct Captured {
    variant: u32,
    graph: ffi::Graph,
    inputs: Vec<Tensor>,
    outputs: Vec<Tensor>,
}

/// Whether `inputs` fit the tensors a graph was captured with.
fn same_shapes(captured: &[Tensor], inputs: &[&Tensor]) -> bool {
    captured.len() == inputs.len()
        && captured
            .iter()
            .zip(inputs)
            .all(|(c, i)| c.size() == i.size() && c.kind() == i.kind() && c.device() == i.device())
}

impl UpdateGraph {
    /// Graphs when `enabled` and `device` is a CUDA device; an update that runs as written
    /// otherwise, and in a build without graph support (which says so in a warning).
    pub fn new(enabled: bool, device: Device) -> Result<UpdateGraph, GraphError> {
        let Device::Cuda(index) = device else {
            return Ok(UpdateGraph::default());
        };
        if !enabled {
            return Ok(UpdateGraph::default());
        }
        if !ffi::BUILT {
            tracing::warn!(
                "this build has no CUDA graphs (built against a libtorch without CUDA, without \
                 the CUDA runtime headers, or with FLEETRL_LINK_CUDA=0): updates launch their \
                 kernels one by one"
            );
            return Ok(UpdateGraph::default());
        }
        Ok(UpdateGraph {
            state: State::On {
                stream: ffi::SideStream::new(index)?,
                warm_up_left: WARM_UP,
                graphs: Vec::new(),
            },
        })
    }

    /// [`UpdateGraph::new`] for a learner whose steps `optims` take: they count their steps
    /// on the device when the graph is on (see [`super::Adam::count_on_device`]).
    pub fn over(
        enabled: bool,
        device: Device,
        optims: &mut [&mut super::Adam],
    ) -> Result<UpdateGraph, GraphError> {
        let graph = UpdateGraph::new(enabled, device)?;
        if graph.enabled() {
            for optim in optims {
                optim.count_on_device();
            }
        }
        Ok(graph)
    }

    /// [`UpdateGraph::run`] for an update of `learner` on a batch, the graph being
    /// `learner`'s own (reached through `graph`): `step` gets the learner and the batch (the
    /// graph's copy once captured).
    pub fn train<L, B: GraphBatch>(
        learner: &mut L,
        graph: fn(&mut L) -> &mut UpdateGraph,
        variant: u32,
        batch: &B,
        mut step: impl FnMut(&mut L, &B) -> Vec<Tensor>,
    ) -> Result<Vec<Tensor>, GraphError> {
        if !graph(learner).enabled() {
            return Ok(step(learner, batch));
        }
        let mut taken = std::mem::take(graph(learner));
        let out = taken.run(variant, &batch.fields(), |fields| {
            step(learner, &B::from_fields(fields))
        });
        *graph(learner) = taken;
        out
    }

    /// Whether updates are captured.
    pub fn enabled(&self) -> bool {
        matches!(self.state, State::On { .. })
    }

    /// Runs `step` on `inputs` and returns what it returned: as written, or by replaying the
    /// graph captured from it for `variant`, which then reads copies of `inputs` (the returned
    /// tensors are the graph's own, valid until the next replay). `step` must be the same
    /// device work for the same `variant` on every call. Inputs of another shape than the
    /// captured ones run eagerly.
    pub fn run(
        &mut self,
        variant: u32,
        inputs: &[&Tensor],
        mut step: impl FnMut(&[Tensor]) -> Vec<Tensor>,
    ) -> Result<Vec<Tensor>, GraphError> {
        let eager = |step: &mut dyn FnMut(&[Tensor]) -> Vec<Tensor>| {
            let inputs: Vec<Tensor> = inputs.iter().map(|t| t.shallow_clone()).collect();
            step(&inputs)
        };
        let State::On {
            stream,
            warm_up_left,
            graphs,
        } = &mut self.state
        else {
            return Ok(eager(&mut step));
        };
        if *warm_up_left > 0 {
            *warm_up_left -= 1;
            stream.enter()?;
            let out = eager(&mut step);
            stream.exit()?;
            return Ok(out);
        }
        let found = graphs.iter().position(|g| g.variant == variant);
        let index = match found {
            Some(i) if same_shapes(&graphs[i].inputs, inputs) => i,
            Some(_) => return Ok(eager(&mut step)),
            None => {
                let copies: Vec<Tensor> = inputs.iter().map(|t| t.detach().copy()).collect();
                let graph = ffi::Graph::new()?;
                stream.enter()?;
                let captured = graph.capture_begin().map(|()| step(&copies));
                let ended = graph.capture_end();
                stream.exit()?;
                let outputs = captured?;
                ended?;
                graphs.push(Captured {
                    variant,
                    graph,
                    inputs: copies,
                    outputs,
                });
                // The capture ran nothing: the replay below does this update.
                graphs.len() - 1
            }
        };
        let captured = &graphs[index];
        {
            let _guard = tch::no_grad_guard();
            for (to, from) in captured.inputs.iter().zip(inputs) {
                to.shallow_clone().copy_(from);
            }
        }
        captured.graph.replay()?;
        Ok(captured.outputs.iter().map(|t| t.shallow_clone()).collect())
    }
}

#[cfg(fleetrl_cuda_graph)]
mod ffi {
    //! The C++ shim over libtorch's `at::cuda::CUDAGraph` (core/csrc/cuda_graph.cpp).

    use std::ffi::{c_char, c_int, c_void, CStr};

    use super::GraphError;

    /// Whether this build has graph support.
    pub(super) const BUILT: bool = true;

    extern "C" {
        fn fleetrl_cuda_free_error(err: *mut c_char);
        fn fleetrl_cuda_side_stream_new(device: c_int, err: *mut *mut c_char) -> *mut c_void;
        fn fleetrl_cuda_side_stream_free(stream: *mut c_void);
        fn fleetrl_cuda_side_stream_enter(stream: *mut c_void, err: *mut *mut c_char) -> c_int;
        fn fleetrl_cuda_side_stream_exit(stream: *mut c_void, err: *mut *mut c_char) -> c_int;
        fn fleetrl_cuda_graph_new(err: *mut *mut c_char) -> *mut c_void;
        fn fleetrl_cuda_graph_free(graph: *mut c_void);
        fn fleetrl_cuda_graph_capture_begin(graph: *mut c_void, err: *mut *mut c_char) -> c_int;
        fn fleetrl_cuda_graph_capture_end(graph: *mut c_void, err: *mut *mut c_char) -> c_int;
        fn fleetrl_cuda_graph_replay(graph: *mut c_void, err: *mut *mut c_char) -> c_int;
    }

    /// Calls a shim function that reports failure by returning nonzero with a message in its
    /// error out-parameter, and turns that into an error naming `what`.
    fn call(
        what: &'static str,
        f: impl FnOnce(*mut *mut c_char) -> c_int,
    ) -> Result<(), GraphError> {
        let mut err: *mut c_char = std::ptr::null_mut();
        if f(&mut err) == 0 {
            return Ok(());
        }
        let message = if err.is_null() {
            "unknown error".to_string()
        } else {
            // SAFETY: the shim set `err` to a NUL-terminated string from strdup, freed here.
            let message = unsafe { CStr::from_ptr(err) }
                .to_string_lossy()
                .into_owned();
            unsafe { fleetrl_cuda_free_error(err) };
            message
        };
        Err(GraphError::Cuda { what, message })
    }

    /// Like [`call`] for a shim function that returns a new handle, null when it failed.
    fn make(
        what: &'static str,
        f: impl FnOnce(*mut *mut c_char) -> *mut c_void,
    ) -> Result<*mut c_void, GraphError> {
        let mut handle = std::ptr::null_mut();
        call(what, |err| {
            handle = f(err);
            c_int::from(handle.is_null())
        })?;
        Ok(handle)
    }

    /// A stream from libtorch's pool that a capture runs on.
    #[derive(Debug)]
    pub(super) struct SideStream(*mut c_void);

    // SAFETY: the handle is only used by the thread that owns the learner state holding it,
    // and libtorch's stream handles are plain values.
    unsafe impl Send for SideStream {}

    impl SideStream {
        pub(super) fn new(device: usize) -> Result<SideStream, GraphError> {
            // SAFETY: the shim writes only through the valid out-pointer it is given.
            make("getting a CUDA stream", |err| unsafe {
                fleetrl_cuda_side_stream_new(device as c_int, err)
            })
            .map(SideStream)
        }

        /// Makes this stream current on this thread, after the work queued so far.
        pub(super) fn enter(&self) -> Result<(), GraphError> {
            // SAFETY: `self.0` is a live handle from `new`.
            call("entering the side stream", |err| unsafe {
                fleetrl_cuda_side_stream_enter(self.0, err)
            })
        }

        /// Makes the stream that was current again, after this one's work.
        pub(super) fn exit(&self) -> Result<(), GraphError> {
            // SAFETY: as in `enter`.
            call("leaving the side stream", |err| unsafe {
                fleetrl_cuda_side_stream_exit(self.0, err)
            })
        }
    }

    impl Drop for SideStream {
        fn drop(&mut self) {
            // SAFETY: `self.0` came from `new` and is dropped once.
            unsafe { fleetrl_cuda_side_stream_free(self.0) }
        }
    }

    /// A libtorch `CUDAGraph`.
    #[derive(Debug)]
    pub(super) struct Graph(*mut c_void);

    // SAFETY: as for `SideStream`: one owner thread at a time.
    unsafe impl Send for Graph {}

    impl Graph {
        pub(super) fn new() -> Result<Graph, GraphError> {
            // SAFETY: the shim writes only through the valid out-pointer it is given.
            make("creating a CUDA graph", |err| unsafe {
                fleetrl_cuda_graph_new(err)
            })
            .map(Graph)
        }

        pub(super) fn capture_begin(&self) -> Result<(), GraphError> {
            // SAFETY: `self.0` is a live graph (as in the two methods below).
            call("starting the capture", |err| unsafe {
                fleetrl_cuda_graph_capture_begin(self.0, err)
            })
        }

        pub(super) fn capture_end(&self) -> Result<(), GraphError> {
            call("capturing the update", |err| unsafe {
                fleetrl_cuda_graph_capture_end(self.0, err)
            })
        }

        pub(super) fn replay(&self) -> Result<(), GraphError> {
            call("replaying the update", |err| unsafe {
                fleetrl_cuda_graph_replay(self.0, err)
            })
        }
    }

    impl Drop for Graph {
        fn drop(&mut self) {
            // SAFETY: `self.0` came from `new` and is dropped once.
            unsafe { fleetrl_cuda_graph_free(self.0) }
        }
    }
}

#[cfg(not(fleetrl_cuda_graph))]
mod ffi {
    //! A build without graph support: [`super::UpdateGraph::new`] never makes these, and
    //! every call says there is no graph support.

    use super::GraphError;

    /// Whether this build has graph support.
    pub(super) const BUILT: bool = false;

    fn unbuilt<T>() -> Result<T, GraphError> {
        Err(GraphError::Cuda {
            what: "a graph call",
            message: "this build has no CUDA graphs".to_string(),
        })
    }

    #[derive(Debug)]
    pub(super) struct SideStream;

    #[derive(Debug)]
    pub(super) struct Graph;

    impl SideStream {
        pub(super) fn new(_device: usize) -> Result<SideStream, GraphError> {
            unbuilt()
        }
        pub(super) fn enter(&self) -> Result<(), GraphError> {
            unbuilt()
        }
        pub(super) fn exit(&self) -> Result<(), GraphError> {
            unbuilt()
        }
    }

    impl Graph {
        pub(super) fn new() -> Result<Graph, GraphError> {
            unbuilt()
        }
        pub(super) fn capture_begin(&self) -> Result<(), GraphError> {
            unbuilt()
        }
        pub(super) fn capture_end(&self) -> Result<(), GraphError> {
            unbuilt()
        }
        pub(super) fn replay(&self) -> Result<(), GraphError> {
            unbuilt()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Off, or on the CPU whatever the setting, the step runs as written on the inputs
    /// themselves.
    #[test]
    fn off_or_on_the_cpu_the_step_runs_as_written() {
        for enabled in [false, true] {
            let mut graph = UpdateGraph::new(enabled, Device::Cpu).unwrap();
            assert!(!graph.enabled());
            let x = Tensor::from_slice(&[1.0f32, 2.0]);
            for _ in 0..2 * WARM_UP {
                let out = graph.run(0, &[&x], |i| vec![&i[0] * 3.0]).unwrap();
                assert_eq!(Vec::<f32>::try_from(&out[0]).unwrap(), vec![3.0, 6.0]);
            }
        }
    }

    /// A batch rebuilt from its fields has every tensor where it was: a graph copies a batch
    /// field by field into its own tensors and hands the update a batch over those, so an
    /// order mix-up would train on the wrong data (and only on a GPU).
    #[test]
    fn batches_rebuilt_from_their_fields_keep_every_tensor_in_place() {
        use crate::items::round::RoundBatch;
        use crate::items::transition::TransitionBatch;
        // Six tensors of different values: a field read back into another's place differs.
        let distinct = |i: i64| Tensor::full([2, 3], i as f64, (tch::Kind::Float, Device::Cpu));
        fn check<B: GraphBatch>(batch: &B, what: &str) {
            let copies: Vec<Tensor> = batch.fields().into_iter().map(Tensor::copy).collect();
            let back = B::from_fields(&copies);
            for (i, (got, want)) in back.fields().into_iter().zip(batch.fields()).enumerate() {
                assert!(got.equal(want), "{what} field {i}");
            }
        }
        let t = TransitionBatch {
            obs: distinct(0),
            action: distinct(1),
            reward: distinct(2),
            discount: distinct(3),
            next_obs: distinct(4),
            weights: distinct(5),
        };
        check(&t, "transition");
        let r = RoundBatch {
            obs: distinct(0),
            action: distinct(1),
            reward: distinct(2),
            score: distinct(3),
            terminated: distinct(4),
            next_obs: distinct(5),
        };
        check(&r, "round");
    }

    /// A failed call names what failed and how to run without graphs.
    #[test]
    fn errors_say_how_to_turn_graphs_off() {
        let err = GraphError::Cuda {
            what: "capturing the update",
            message: "operation not permitted when stream is capturing".into(),
        };
        let text = err.to_string();
        assert!(text.contains("capturing the update failed"), "{text}");
        assert!(text.contains("learner.cuda_graph = false"), "{text}");
    }
}

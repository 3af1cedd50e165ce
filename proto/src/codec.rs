//! The gRPC codec of every fleetrl service: prost, except that an outgoing message's buffer is
//! reserved at its exact encoded length before encoding. Plain prost encoding grows the buffer
//! by doubling, which for a multi-megabyte batch or weights message means several reallocations
//! and copies of everything encoded so far.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};
use tonic::Status;
use tonic_prost::{ProstCodec, ProstDecoder};

/// [`ProstCodec`] with exact-size encode buffers.
#[derive(Debug, Clone)]
pub struct SizedCodec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for SizedCodec<T, U> {
    fn default() -> Self {
        SizedCodec { _pd: PhantomData }
    }
}

impl<T, U> Codec for SizedCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = SizedEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        SizedEncoder { _pd: PhantomData }
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(BufferSettings::default())
    }
}

/// Encodes `T` into a buffer reserved at its encoded length.
#[derive(Debug, Clone)]
pub struct SizedEncoder<T> {
    _pd: PhantomData<T>,
}

impl<T: Message> Encoder for SizedEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.reserve(item.encoded_len());
        item.encode(buf)
            .map_err(|e| Status::internal(format!("encoding a message: {e}")))
    }
}

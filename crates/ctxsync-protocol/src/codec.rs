//! The gRPC codec of the generated client and server: prost, except that a request's
//! encoded bytes are walked once against SPEC §4's counting limits before any struct is
//! built.
//!
//! Why: protobuf lets two bytes on the wire become a whole struct in memory (an empty
//! repeated entry), so a 10 MB frame within the transport limit could decode to a
//! gigabyte before parsing sees the resource count. The walk allocates nothing and
//! refuses such a message with the same [`WireError`](crate::WireError) parsing would
//! give, or with `ResourceExhausted` when the decoded form would be too large anyway.
//!
//! This module is generic over the message: the generated code ([`v1`](crate::v1)) names
//! its codec, so it sits below the messages, and each message's [`Precheck`] is
//! implemented above them (in `precheck`).

use std::marker::PhantomData;

use prost::Message;
use prost::bytes::{Buf, Bytes};
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

/// Bound on what one decoded message may occupy in memory, estimated from the walk
/// (struct sizes of repeated entries plus the encoded bytes). Every message within the
/// wire limits stays far below it.
pub const MAX_DECODED_BYTES: usize = 64 << 20;

/// tonic's first buffer size, which [`Precheck::BUFFER_BYTES`] keeps unless a message
/// type says otherwise.
pub(crate) const DEFAULT_BUFFER_BYTES: usize = 8 * 1024;

/// A message type the codec can check before decoding.
pub trait Precheck {
    /// The buffer a stream of this message starts with, encoding or decoding (it grows
    /// as a message needs). tonic's 8 KiB suits requests; a call stream's messages are
    /// mostly heartbeats, and a server holds one such stream per agent in each direction.
    const BUFFER_BYTES: usize = DEFAULT_BUFFER_BYTES;

    /// Refuses `encoded` when decoding it would break a counting limit or
    /// [`MAX_DECODED_BYTES`]; must not allocate in proportion to the input.
    fn precheck(encoded: &[u8]) -> Result<(), Status>;
}

/// tonic's default settings but for the buffer's first size.
fn buffer_settings<M: Precheck>() -> BufferSettings {
    const YIELD_THRESHOLD: usize = 32 * 1024;
    BufferSettings::new(M::BUFFER_BYTES, YIELD_THRESHOLD)
}

/// The codec named in the generated code (`cargo xtask codegen` sets its path).
#[derive(Debug)]
pub struct BoundedCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for BoundedCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for BoundedCodec<T, U>
where
    T: Message + Precheck + Send + 'static,
    U: Message + Default + Precheck + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = BoundedDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(buffer_settings::<T>())
    }

    fn decoder(&mut self) -> Self::Decoder {
        BoundedDecoder(PhantomData)
    }
}

/// Walks, then decodes with prost.
#[derive(Debug)]
pub struct BoundedDecoder<U>(PhantomData<U>);

impl<U: Message + Default + Precheck> Decoder for BoundedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        // tonic hands over one whole message, contiguous unless it came compressed.
        let whole: Bytes;
        let encoded = if buf.chunk().len() == buf.remaining() {
            buf.chunk()
        } else {
            whole = buf.copy_to_bytes(buf.remaining());
            &whole[..]
        };
        U::precheck(encoded)?;
        let item = U::decode(encoded).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let consumed = buf.remaining();
        buf.advance(consumed);
        Ok(Some(item))
    }

    fn buffer_settings(&self) -> BufferSettings {
        buffer_settings::<U>()
    }
}

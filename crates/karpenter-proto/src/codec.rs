//! The gRPC codec of every contract: prost, with the decode bounds of
//! [`crate::bounds`] checked on the wire bytes before anything is decoded
//! (servers refuse an amplifying request with INVALID_ARGUMENT naming the
//! field; clients refuse such an answer the same way).

use std::marker::PhantomData;

use bytes::Buf as _;
use prost::Message;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

/// prost's codec behind the decode bounds.
#[derive(Debug, Clone)]
pub struct BoundedCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for BoundedCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for BoundedCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + prost::Name + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = BoundedDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        BoundedDecoder(PhantomData)
    }
}

/// Checks the bounds, then decodes with prost.
#[derive(Debug, Clone)]
pub struct BoundedDecoder<U>(PhantomData<U>);

impl<U: Message + Default + prost::Name> Decoder for BoundedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let bytes = buf.copy_to_bytes(buf.remaining());
        crate::bounds::check(&U::full_name(), &bytes)
            .map_err(|error| Status::invalid_argument(error.to_string()))?;
        // As prost's own codec maps a parse error.
        U::decode(bytes)
            .map(Some)
            .map_err(|error| Status::internal(error.to_string()))
    }
}

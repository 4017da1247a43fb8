//! Unary gRPC calls whose request is already encoded.
//!
//! The scheduler's requests carry the whole cluster. Generated clients
//! take the message by value, so retrying means keeping a clone of it
//! (as large as the snapshot itself) for the whole call; sending the
//! encoded bytes instead keeps one compact copy, shared by every attempt.

use std::marker::PhantomData;

use bytes::BufMut as _;
use tonic::Status;
use tonic::codec::{Codec, Decoder, EncodeBuf, Encoder};
use tonic::codegen::Bytes;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic_prost::ProstDecoder;

/// Sends bytes as they are; decodes the answer as `Resp`.
struct EncodedCodec<Resp>(PhantomData<Resp>);

struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl<Resp> Codec for EncodedCodec<Resp>
where
    Resp: prost::Message + Default + Send + 'static,
    ProstDecoder<Resp>: Decoder<Item = Resp, Error = Status>,
{
    type Encode = Bytes;
    type Decode = Resp;
    type Encoder = BytesEncoder;
    type Decoder = ProstDecoder<Resp>;

    fn encoder(&mut self) -> BytesEncoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> ProstDecoder<Resp> {
        ProstDecoder::default()
    }
}

/// One call of `path` (`/package.Service/Method`) with an encoded request.
pub async fn unary<Resp>(
    channel: Channel,
    path: &'static str,
    request: tonic::Request<Bytes>,
    max_message_bytes: usize,
) -> Result<Resp, Status>
where
    Resp: prost::Message + Default + Send + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel)
        .max_decoding_message_size(max_message_bytes)
        .max_encoding_message_size(max_message_bytes);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(format!("the scheduler is not ready: {e}")))?;
    let codec = EncodedCodec::<Resp>(PhantomData);
    grpc.unary(request, PathAndQuery::from_static(path), codec)
        .await
        .map(tonic::Response::into_inner)
}

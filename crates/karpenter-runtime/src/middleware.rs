//! The tower plumbing the gRPC middlewares of [`crate::serve`] share (request metrics, trace
//! context, admission, panic catching).
//!
//! Each middleware is a layer type that says what it does with one call ([`Middleware`]);
//! [`layer!`] makes it a [`tower::Layer`] whose service is [`Wrapped`], which forwards readiness
//! to the inner service and hands every call to the middleware. The layer types are the public
//! names; the services they produce need no name of their own.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A service a middleware wraps (tonic's routes, or another middleware around them): one whose
/// future can be boxed into a [`ResponseFuture`].
pub trait Inner<B>: tower::Service<http::Request<B>, Future: Send + 'static> {}

impl<S, B> Inner<B> for S where S: tower::Service<http::Request<B>, Future: Send + 'static> {}

/// The answer of a middleware to one call: boxed, so each can answer with an `async` block.
pub type ResponseFuture<S, B> = Pin<
    Box<
        dyn Future<
                Output = Result<
                    <S as tower::Service<http::Request<B>>>::Response,
                    <S as tower::Service<http::Request<B>>>::Error,
                >,
            > + Send,
    >,
>;

/// What a middleware does with one call.
pub trait Middleware<S: Inner<B>, B> {
    /// Answers `request`, passing it on to `inner` (which is ready) or answering itself.
    fn call(&self, inner: &mut S, request: http::Request<B>) -> ResponseFuture<S, B>;
}

/// The service a middleware's layer puts around the inner service.
#[derive(Clone)]
pub struct Wrapped<M, S> {
    pub(crate) middleware: M,
    pub(crate) inner: S,
}

impl<M, S, B> tower::Service<http::Request<B>> for Wrapped<M, S>
where
    S: Inner<B>,
    M: Middleware<S, B>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        self.middleware.call(&mut self.inner, request)
    }
}

/// Makes a [`Middleware`] (a `Clone` type) a [`tower::Layer`] that wraps services in
/// [`Wrapped`]. A macro because each layer needs its own impl of the foreign trait.
macro_rules! layer {
    ($middleware:ty) => {
        impl<S> tower::Layer<S> for $middleware {
            type Service = $crate::middleware::Wrapped<Self, S>;

            fn layer(&self, inner: S) -> Self::Service {
                $crate::middleware::Wrapped {
                    middleware: self.clone(),
                    inner,
                }
            }
        }
    };
}

pub(crate) use layer;

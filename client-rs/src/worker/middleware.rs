//! Middleware: code around every handler call of a worker (logging, tracing,
//! metrics, turning one kind of error into another). A middleware gets the task's
//! context and the rest of the chain, [`Next`]; it may look at the task, call
//! `next.run(ctx)` (or not), and look at or replace the outcome. The first
//! registered is the outermost.

use std::future::Future;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::TaskContext;
use super::handler::{BoxHandler, TaskError};

/// The rest of the chain: the next middleware, or the handler itself.
pub struct Next {
    inner: BoxHandler,
}

impl Next {
    /// Runs the rest of the chain; its outcome is the result bytes or the error.
    pub async fn run(self, ctx: TaskContext) -> Result<Vec<u8>, TaskError> {
        (self.inner)(ctx).await
    }
}

/// A middleware with its types erased.
pub(crate) type BoxMiddleware =
    Arc<dyn Fn(TaskContext, Next) -> BoxFuture<'static, Result<Vec<u8>, TaskError>> + Send + Sync>;

pub(crate) fn boxed<M, Fut>(m: M) -> BoxMiddleware
where
    M: Fn(TaskContext, Next) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<u8>, TaskError>> + Send + 'static,
{
    Arc::new(move |ctx, next| m(ctx, next).boxed())
}

/// `handler` wrapped in `chain`, the first middleware outermost.
pub(crate) fn wrap(handler: BoxHandler, chain: &[BoxMiddleware]) -> BoxHandler {
    chain.iter().rev().fold(handler, |inner, m| {
        let m = m.clone();
        Arc::new(move |ctx| {
            m(
                ctx,
                Next {
                    inner: inner.clone(),
                },
            )
        })
    })
}

//! Reading a response body up to the storage cap without losing what lies
//! beyond it.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use http_body_util::BodyExt as _;

/// A response body read as far as the cap allows.
pub(crate) enum Capped {
    /// The whole body, within the cap.
    Whole(Bytes),
    /// Over the cap: what was read, and a body that sends it all again.
    Over(Body),
}

/// Reads `body` until its end or until more than `cap` bytes have arrived.
/// Trailers are dropped. An error from `body` is returned as is.
pub(crate) async fn read_capped(mut body: Body, cap: usize) -> Result<Capped, axum::Error> {
    let mut read = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        read.extend_from_slice(&data);
        if read.len() > cap {
            return Ok(Capped::Over(Body::new(Prefixed {
                prefix: Some(Bytes::from(read)),
                rest: body,
            })));
        }
    }
    Ok(Capped::Whole(Bytes::from(read)))
}

/// `prefix`, then whatever `rest` still has.
struct Prefixed {
    prefix: Option<Bytes>,
    rest: Body,
}

impl HttpBody for Prefixed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(prefix))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.rest.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_within_the_cap_is_read_whole() {
        let Capped::Whole(bytes) = read_capped(Body::from("hello"), 5).await.unwrap() else {
            panic!("within the cap")
        };
        assert_eq!(&bytes[..], b"hello");
    }

    #[tokio::test]
    async fn a_body_over_the_cap_is_passed_on_in_full() {
        // Three frames: "abc", "def", "ghi".
        let body = Body::new(Prefixed {
            prefix: Some(Bytes::from_static(b"abc")),
            rest: Body::new(Prefixed {
                prefix: Some(Bytes::from_static(b"def")),
                rest: Body::from("ghi"),
            }),
        });
        let Capped::Over(body) = read_capped(body, 4).await.unwrap() else {
            panic!("over the cap")
        };
        let all = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        assert_eq!(&all[..], b"abcdefghi");
    }
}

//! The `bad_input` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use taskbroker_client::{Client, TaskSpec};

use crate::{Outcome, check};

pub(crate) async fn bad_input(c: Client, _q: String) -> Outcome {
    match c.submit(TaskSpec::new("has space", Vec::new())).await {
        Ok(_) => Err("a queue named \"has space\" was accepted".into()),
        Err(e) => {
            check(
                e.code() == Some(tonic::Code::InvalidArgument),
                format!("got {e}, want INVALID_ARGUMENT"),
            )?;
            check(
                e.to_string().contains("tasks[0].queue"),
                format!("{e:?} does not name tasks[0].queue"),
            )
        }
    }
}

//! `weight_inspect.get_tensor(url, name)`: a tensor from a `weight-inspect serve` server,
//! checked against its `X-Weight-SHA256` before Python sees a byte.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use weight_inspect::format::DType;
use weight_inspect::serve::client::{self, Described, GetError};

use crate::errors::{Failure, Kind};

/// The tensor's description (the keys of `NativeModel.tensor_info`, its `file` 0 and `offset`
/// 0: the bytes stand alone) and its bytes.
fn fetch(url: &str, name: &str) -> Result<(Described, Vec<u8>), Failure> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::local(format!("cannot start the runtime: {e}")))?;
    let http = reqwest::Client::builder()
        .build()
        .map_err(|e| Failure::local(e.to_string()))?;
    rt.block_on(async {
        let d = client::describe(&http, url, name).await.map_err(failure)?;
        let (bytes, _) = client::get_tensor_bytes(&http, url, name, None)
            .await
            .map_err(failure)?;
        if bytes.len() as u64 != d.n_bytes {
            return Err(Failure::of(
                weight_inspect::exit::ExitClass::Integrity,
                format!(
                    "{url}: '{name}' came as {} bytes, its report says {}",
                    bytes.len(),
                    d.n_bytes
                ),
            ));
        }
        Ok((d, bytes))
    })
}

fn failure(e: GetError) -> Failure {
    match &e {
        GetError::Status {
            status: 404,
            message,
            ..
        } if message.starts_with("no tensor") => Failure::kind(Kind::MissingTensor, e.to_string()),
        _ => Failure::of(e.exit_class(), e.to_string()),
    }
}

/// `get_tensor(url, name)`: `(bytes, description)` of tensor `name` of the model served at
/// `url` (`http://HOST:PORT/models/MODEL`), its bytes checked against the server's
/// `X-Weight-SHA256`. Releases the GIL while fetching.
#[pyfunction]
pub fn get_tensor<'py>(
    py: Python<'py>,
    url: String,
    name: String,
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyDict>)> {
    let (d, bytes) = py.detach(move || fetch(&url, &name))?;
    let out = PyDict::new(py);
    out.set_item("name", &d.name)?;
    out.set_item("dtype", d.dtype.name())?;
    out.set_item("shape", d.shape.clone())?;
    out.set_item("file", 0)?;
    out.set_item("offset", 0)?;
    out.set_item("n_bytes", d.n_bytes)?;
    out.set_item("big_endian", d.big_endian)?;
    match d.dtype {
        DType::Ggml(t) => {
            out.set_item("kind", "ggml")?;
            out.set_item("block_size", t.block_size())?;
            out.set_item("type_size", t.type_size())?;
        }
        DType::Safetensors(s) => {
            out.set_item("kind", "safetensors")?;
            out.set_item("bits", s.bits())?;
        }
    }
    Ok((PyBytes::new(py, &bytes), out))
}

//! Failures as Python exceptions: the classes live in `weight_inspect/errors.py` (so that they
//! can also derive from `FileNotFoundError` or `KeyError`), resolved once when the native module
//! is imported; here each failure is given its class and the message the command-line tools
//! print for it.

use pyo3::exceptions::PyImportError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyModule, PyType};
use weight_inspect::exit::ExitClass;
use weight_inspect::names::escape;

/// Which exception class a failure raises (all of them `weight_inspect.WeightInspectError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The failure's exit class alone: `LocalError`, `IntegrityError`, `NetworkError`,
    /// `NotFoundError` or `Interrupted`.
    Class(ExitClass),
    /// A local file or folder that does not exist: `MissingFileError` (a `LocalError` and a
    /// `FileNotFoundError`).
    MissingFile,
    /// A tensor name the model does not have: `MissingTensorError` (a `LocalError` and a
    /// `KeyError`).
    MissingTensor,
    /// Bytes that differ from what a verified load checks them against: `VerificationError`
    /// (an `IntegrityError`).
    Verification,
}

/// A failure to raise in Python: its class and message.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The class.
    pub kind: Kind,
    /// The message, as the command-line tools print it after `error: ` (escaped).
    pub message: String,
    /// What precisely was not found or refused, for the drop-ins of huggingface_hub
    /// (`repo_not_found`, `revision_not_found`, `entry_not_found`, `gated`, `not_cached`,
    /// `nothing_selected`, `incomplete_snapshot`): the exception's `reason` attribute
    /// (`None` otherwise).
    pub reason: Option<&'static str>,
    /// More attributes of the exception (`snapshot_path` and `missing` of an incomplete
    /// snapshot).
    pub attrs: Vec<(&'static str, Attr)>,
}

/// The value of an exception attribute.
#[derive(Debug, Clone)]
pub enum Attr {
    /// A `str`.
    Str(String),
    /// A `list[str]`.
    List(Vec<String>),
}

impl Failure {
    /// A usage or local failure (exit class 1).
    pub fn local(message: impl std::fmt::Display) -> Failure {
        Failure::of(ExitClass::Local, message)
    }

    /// A failure of an exit class.
    pub fn of(class: ExitClass, message: impl std::fmt::Display) -> Failure {
        Failure {
            kind: Kind::Class(class),
            message: escape(&message.to_string()).into_owned(),
            reason: None,
            attrs: Vec::new(),
        }
    }

    /// A failure of a given kind.
    pub fn kind(kind: Kind, message: impl std::fmt::Display) -> Failure {
        Failure {
            kind,
            message: escape(&message.to_string()).into_owned(),
            reason: None,
            attrs: Vec::new(),
        }
    }

    /// An I/O failure about a path: `MissingFileError` when the path does not exist, a
    /// `LocalError` otherwise.
    pub fn io(error: &std::io::Error, message: impl std::fmt::Display) -> Failure {
        if error.kind() == std::io::ErrorKind::NotFound {
            Failure::kind(Kind::MissingFile, message)
        } else {
            Failure::local(message)
        }
    }

    /// This failure, with its [`reason`](Failure::reason).
    pub fn with_reason(mut self, reason: Option<&'static str>) -> Failure {
        self.reason = reason;
        self
    }

    /// This failure, with one more attribute (see [`Failure::attrs`]).
    pub fn with_attr(mut self, name: &'static str, value: Attr) -> Failure {
        self.attrs.push((name, value));
        self
    }
}

/// The exception classes of `weight_inspect.errors`, resolved once when the native module is
/// imported ([`init`]): a missing class fails that import, loudly, instead of a failure being
/// raised later as some other class.
struct Classes {
    missing_file: Py<PyType>,
    missing_tensor: Py<PyType>,
    verification: Py<PyType>,
    integrity: Py<PyType>,
    network: Py<PyType>,
    not_found: Py<PyType>,
    denied: Py<PyType>,
    interrupted: Py<PyType>,
    local: Py<PyType>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

/// Resolve the exception classes (called by the module's initialisation).
pub fn init(py: Python<'_>) -> PyResult<()> {
    CLASSES
        .get_or_try_init(py, || {
            let module = PyModule::import(py, "weight_inspect.errors")?;
            let class = |name: &str| -> PyResult<Py<PyType>> {
                Ok(module.getattr(name)?.cast_into::<PyType>()?.unbind())
            };
            Ok::<_, PyErr>(Classes {
                missing_file: class("MissingFileError")?,
                missing_tensor: class("MissingTensorError")?,
                verification: class("VerificationError")?,
                integrity: class("IntegrityError")?,
                network: class("NetworkError")?,
                not_found: class("NotFoundError")?,
                denied: class("AccessDeniedError")?,
                interrupted: class("Interrupted")?,
                local: class("LocalError")?,
            })
        })
        .map(|_| ())
}

impl From<Failure> for PyErr {
    fn from(f: Failure) -> PyErr {
        Python::attach(|py| {
            let classes = match CLASSES.get(py) {
                Some(c) => c,
                None => {
                    if let Err(e) = init(py) {
                        return e;
                    }
                    match CLASSES.get(py) {
                        Some(c) => c,
                        None => return PyImportError::new_err("weight_inspect.errors"),
                    }
                }
            };
            let class = match f.kind {
                Kind::MissingFile => &classes.missing_file,
                Kind::MissingTensor => &classes.missing_tensor,
                Kind::Verification => &classes.verification,
                Kind::Class(ExitClass::Integrity) => &classes.integrity,
                Kind::Class(ExitClass::Network) => &classes.network,
                Kind::Class(ExitClass::NotFound) => &classes.not_found,
                Kind::Class(ExitClass::Denied) => &classes.denied,
                Kind::Class(ExitClass::Interrupted) => &classes.interrupted,
                Kind::Class(_) => &classes.local,
            };
            let made = class
                .bind(py)
                .call1((f.message.clone(),))
                .and_then(|exc| exc.setattr("reason", f.reason).map(|()| exc))
                .and_then(|exc| {
                    for (name, value) in &f.attrs {
                        match value {
                            Attr::Str(s) => exc.setattr(*name, s)?,
                            Attr::List(l) => exc.setattr(*name, l)?,
                        }
                    }
                    Ok(exc)
                });
            match made {
                Ok(exc) => PyErr::from_value(exc),
                // Making the exception failed (out of memory): that failure is raised.
                Err(e) => e,
            }
        })
    }
}

//! One client's names: the object ids, buffer ids and upload ids it may use, each mapped to
//! the engine's, and the translation of its submission entries.
//!
//! A client names only what it interned, registered or created itself: its ids index its own
//! tables, so no id it can write reaches another client's buffers, objects or uploads.

use std::collections::HashMap;

use engine::gpu::DevicePtr;
use engine::{BufHandle, Cqe, ErrorClass, ErrorCode, ObjectId, Sqe, UploadHandle};
use ring_api::Op;

use engine::attach::SharedMemory;

/// Most registrations one client may hold.
pub(crate) const MAX_REGISTRATIONS: usize = 4096;
/// Most object names one client may intern.
pub(crate) const MAX_OBJECTS: usize = 1 << 20;

/// What keeps a registration's memory reachable by the daemon.
#[derive(Debug)]
pub(crate) enum Held {
    /// The client's memfd, mapped here (kept only so the mapping lives until deregistered).
    Host(#[allow(dead_code)] SharedMemory),
    /// Device memory opened from the client's IPC export (closed after deregistration).
    Device {
        /// Base of the opened allocation (what `ipc_close` takes).
        base: DevicePtr,
    },
}

/// One registration of a client.
#[derive(Debug)]
pub(crate) struct Registration {
    /// The engine's handle.
    pub(crate) handle: BufHandle,
    /// Bytes registered.
    pub(crate) len: u64,
    pub(crate) held: Held,
}

/// A client's tables.
#[derive(Debug, Default)]
pub(crate) struct Names {
    objects: Vec<ObjectId>,
    object_ids: HashMap<(String, String), u32>,
    bufs: HashMap<u32, Registration>,
    next_buf: u32,
    uploads: HashMap<u32, UploadHandle>,
    next_upload: u32,
}

/// A client entry that names something the client does not have.
fn bad_handle(sqe: &Sqe) -> Cqe {
    Cqe::error(sqe.user_data(), ErrorCode::BadHandle, ErrorClass::Invalid)
}

impl Names {
    /// The client's id for an engine object, interning `(bucket, key)` with `intern` once.
    pub(crate) fn object<E>(
        &mut self,
        bucket: &str,
        key: &str,
        intern: impl FnOnce() -> Result<ObjectId, E>,
    ) -> Result<Option<u32>, E> {
        let name = (bucket.to_owned(), key.to_owned());
        if let Some(id) = self.object_ids.get(&name) {
            return Ok(Some(*id));
        }
        if self.objects.len() >= MAX_OBJECTS {
            return Ok(None);
        }
        let engine_id = intern()?;
        let id = self.objects.len() as u32;
        self.objects.push(engine_id);
        self.object_ids.insert(name, id);
        Ok(Some(id))
    }

    /// Records a registration; `None` when the client holds [`MAX_REGISTRATIONS`] already.
    pub(crate) fn add_registration(&mut self, reg: Registration) -> Result<u32, Registration> {
        if self.bufs.len() >= MAX_REGISTRATIONS {
            return Err(reg);
        }
        let id = self.next_buf;
        self.next_buf = self.next_buf.wrapping_add(1);
        self.bufs.insert(id, reg);
        Ok(id)
    }

    pub(crate) fn take_registration(&mut self, id: u32) -> Option<Registration> {
        self.bufs.remove(&id)
    }

    /// Puts back a registration that could not be released yet.
    pub(crate) fn restore_registration(&mut self, id: u32, reg: Registration) {
        self.bufs.insert(id, reg);
    }

    /// Every registration, leaving the table empty (the client is gone).
    pub(crate) fn drain_registrations(&mut self) -> Vec<Registration> {
        self.bufs.drain().map(|(_, r)| r).collect()
    }

    /// Live registrations and the bytes they cover.
    pub(crate) fn registered(&self) -> (u32, u64) {
        (
            self.bufs.len() as u32,
            self.bufs.values().map(|r| r.len).sum(),
        )
    }

    /// The client's id for an upload the engine created for it.
    pub(crate) fn add_upload(&mut self, engine: UploadHandle) -> u32 {
        let id = self.next_upload;
        self.next_upload = self.next_upload.wrapping_add(1);
        self.uploads.insert(id, engine);
        id
    }

    fn buf(&self, sqe: &Sqe, b: BufHandle) -> Result<BufHandle, Cqe> {
        self.bufs
            .get(&b.0)
            .map(|r| r.handle)
            .ok_or_else(|| bad_handle(sqe))
    }

    fn obj(&self, sqe: &Sqe, o: ObjectId) -> Result<ObjectId, Cqe> {
        self.objects
            .get(o.0 as usize)
            .copied()
            .ok_or_else(|| bad_handle(sqe))
    }

    fn upload(&self, sqe: &Sqe, u: UploadHandle) -> Result<UploadHandle, Cqe> {
        self.uploads
            .get(&u.0)
            .copied()
            .ok_or_else(|| bad_handle(sqe))
    }

    /// The engine's entry for a client's: validated, every name translated. An entry that
    /// fails validation or names something the client does not have becomes the error
    /// completion to post back instead.
    pub(crate) fn translate(&self, sqe: &Sqe) -> Result<Translated, Cqe> {
        let valid = sqe.validate().map_err(|e| e.to_cqe(sqe.user_data()))?;
        let out = match valid.op {
            Op::Nop | Op::Cancel { .. } => *sqe,
            Op::Get { object, dst } | Op::RangeGet { object, dst, .. } => sqe
                .with_object(self.obj(sqe, object)?)
                .with_buf(self.buf(sqe, dst.buf)?),
            Op::Head { object } | Op::CreateMultipart { object } => {
                sqe.with_object(self.obj(sqe, object)?)
            }
            Op::Put { object, src } => sqe
                .with_object(self.obj(sqe, object)?)
                .with_buf(self.buf(sqe, src.buf)?),
            Op::UploadPart {
                object,
                upload,
                src,
                ..
            } => sqe
                .with_object(self.obj(sqe, object)?)
                .with_upload(self.upload(sqe, upload)?)
                .with_buf(self.buf(sqe, src.buf)?),
            Op::CompleteMultipart { object, upload, .. }
            | Op::AbortMultipart { object, upload } => sqe
                .with_object(self.obj(sqe, object)?)
                .with_upload(self.upload(sqe, upload)?),
            _ => {
                return Err(Cqe::error(
                    sqe.user_data(),
                    ErrorCode::Unsupported,
                    ErrorClass::Invalid,
                ));
            }
        };
        Ok(Translated {
            sqe: out,
            creates_upload: matches!(valid.op, Op::CreateMultipart { .. }),
        })
    }

    /// The client's completion for an engine completion of an entry it submitted: a created
    /// upload's engine handle (in `aux`) becomes the client's id for it.
    pub(crate) fn completion(&mut self, cqe: Cqe, creates_upload: bool) -> Cqe {
        if creates_upload && cqe.is_ok() {
            let id = self.add_upload(UploadHandle(cqe.aux() as u32));
            return Cqe::from_raw(
                cqe.user_data(),
                cqe.result(),
                cqe.flags(),
                cqe.bytes(),
                u64::from(id),
            );
        }
        cqe
    }
}

/// A client entry ready for the engine.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Translated {
    pub(crate) sqe: Sqe,
    /// A CreateMultipart: its completion's `aux` is an upload handle to translate back.
    pub(crate) creates_upload: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::BufSlice;
    use engine::opcode::{Get, Nop};

    fn names_with(objects: &[u32]) -> Names {
        let mut n = Names::default();
        for (i, o) in objects.iter().enumerate() {
            n.object(&format!("b{i}"), "k", || Ok::<_, ()>(ObjectId(*o)))
                .unwrap();
        }
        n
    }

    #[test]
    fn a_client_names_only_its_own_objects_and_buffers() {
        let n = names_with(&[70, 71]);
        // Object 1 of this client is the engine's 71; buffer 0 is unregistered.
        let sqe = Get::new(ObjectId(1), BufSlice::new(BufHandle(0), 0, 8))
            .user_data(9)
            .build();
        let err = n.translate(&sqe).unwrap_err();
        assert_eq!(err.user_data(), 9);
        assert_eq!(err.error_code(), Some(ErrorCode::BadHandle));
        let sqe = Get::new(ObjectId(2), BufSlice::new(BufHandle(0), 0, 8)).build();
        assert_eq!(
            n.translate(&sqe).unwrap_err().error_code(),
            Some(ErrorCode::BadHandle)
        );
        // A Nop passes as it is.
        let nop = Nop::new().user_data(3).build();
        assert_eq!(n.translate(&nop).unwrap().sqe, nop);
    }

    #[test]
    fn interning_the_same_name_twice_gives_the_same_id() {
        let mut n = Names::default();
        let a = n.object("b", "k", || Ok::<_, ()>(ObjectId(5))).unwrap();
        let b = n
            .object("b", "k", || -> Result<ObjectId, ()> {
                panic!("interned twice")
            })
            .unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn invalid_entries_complete_with_their_validation_error() {
        let n = Names::default();
        let mut raw = Nop::new().user_data(4).build().to_bytes();
        raw[0] = 0xEE; // unknown opcode
        let err = n.translate(&Sqe::from_bytes(&raw)).unwrap_err();
        assert_eq!(err.user_data(), 4);
        assert!(!err.is_ok());
    }
}

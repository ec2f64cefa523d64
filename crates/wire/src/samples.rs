//! One message of every kind, for round-trip tests and the fuzzer's seed corpus.

use somnus_core::cluster::{
    BindCondition, BindRequest, ChunkId, ChunkIndex, DvlHandoff, Epoch, GroupView, HeldObject,
    LeaseGrant, LeaseRenewal, ListedObject, LogRecord, LoggedExtent, Message, MetadataError,
    ObjectInfo, ObjectRef, Payload, Piece, ReplyBody, RequestError, ServerPower, ServerTime,
    SpaceReport, Stamp, UnstableWrite,
};
use somnus_core::gear::LoadSample;
use somnus_types::{ByteRange, ChunkGroupId, ObjectId, ServerId, Version, VirtualInstant};

/// Every variant of [`Message`], each with fields that are not all zero.
pub fn every_message() -> Vec<Message> {
    let group = ChunkGroupId(17);
    let epoch = Epoch(3);
    let chunk = ChunkId { object: ObjectId(42), chunk: ChunkIndex(2) };
    let range = ByteRange::from_bounds(4096, 12288);
    // Payloads of the range's size, and one slot with none (the simulator's).
    let bytes = |fill: u8| Payload::new(vec![fill; range.size_bytes() as usize].into());
    let write = UnstableWrite {
        chunk,
        range,
        version: Version(9 << 40 | 5),
        stamp: Stamp(77),
        data: bytes(0xa5),
    };
    let piece = Piece { range, version: Version(8), stamp: Stamp(66), data: bytes(0x3c) };
    let empty = Piece { data: Payload::NONE, ..piece.clone() };
    let record = LogRecord { owner: epoch, chunk, range, version: Version(12) };
    let view = GroupView {
        group,
        epoch,
        primary: Some(ServerId(1)),
        replicas: vec![ServerId(1), ServerId(4), ServerId(7)],
    };
    let handoff = DvlHandoff {
        extents: vec![LoggedExtent {
            record,
            holders: vec![ServerId(2)],
            loggers: vec![ServerId(2), ServerId(5)],
            applied: vec![ServerId(1)],
        }],
        unrecovered: vec![ServerId(5)],
    };
    vec![
        Message::Heartbeat {
            sent_at: ServerTime { incarnation: 3, at: VirtualInstant(1_000_000) },
            power: ServerPower::Draining,
            leads: vec![(group, epoch)],
            full: true,
            load: vec![LoadSample {
                second: 17,
                reads: 3,
                writes: 2,
                read_bytes: 12_288,
                write_bytes: 1 << 20,
            }],
            space: Box::new(SpaceReport {
                stored_bytes: 3 << 20,
                disk_bytes: Some(4 << 20),
                free_bytes: None,
                freed_through: 12,
            }),
        },
        Message::HeartbeatReply(Box::new(LeaseRenewal {
            sent_at: ServerTime { incarnation: 3, at: VirtualInstant(5) },
            renewed: vec![(group, epoch)],
            revoked: vec![(ChunkGroupId(1), Epoch(1))],
            down: vec![ServerId(8)],
            lost: vec![],
            full: vec![ServerId(3)],
            draining: vec![ServerId(5)],
            frees: vec![ObjectId(40), ObjectId(41)],
            frees_through: 13,
        })),
        Message::GrantLease(Box::new(LeaseGrant {
            view: view.clone(),
            lease_from: ServerTime { incarnation: 2, at: VirtualInstant(9) },
            logger_view: vec![ServerId(2)],
            handoff: Some(handoff.clone()),
            rebuilding: vec![ServerId(6)],
            down: vec![ServerId(8)],
            draining: vec![ServerId(5)],
        })),
        Message::MigratePrimary { group, epoch, target: ServerId(4) },
        Message::CancelLease { group, epoch, handoff },
        Message::EnterStandby,
        Message::Standby { sent_at: ServerTime { incarnation: 1, at: VirtualInstant(33) } },
        Message::StandbyAnswer { sleep: true },
        Message::SetLoggerView { group, epoch, seq: 4, loggers: vec![ServerId(2), ServerId(5)] },
        Message::LoggerViewSet { group, epoch, seq: 4 },
        Message::CreateObject { request: 1, name: "volume-é".into(), size_bytes: 2 << 20 },
        Message::LookupObject { request: 2, name: "a".into() },
        Message::DeleteObject { request: 3, name: "b".into() },
        Message::LookupGroup { request: 4, group },
        Message::ObjectFound {
            request: 5,
            info: Box::new(ObjectInfo {
                name: "c".into(),
                object: ObjectId(42),
                size_bytes: 3 << 20,
                chunk_size_bytes: 1 << 20,
                chunk_groups: vec![group, ChunkGroupId(2), group].into(),
                views: vec![view.clone()],
                data: vec![ObjectRef {
                    object: ObjectId(42),
                    size_bytes: 3 << 20,
                    chunk_groups: vec![group, ChunkGroupId(2), group].into(),
                }],
                attrs: b"{\"etag\":\"e\"}".to_vec(),
                generation: 43,
            }),
        },
        Message::ObjectDeleted { request: 6, name: "d".into() },
        Message::GroupFound { request: 7, view },
        Message::MetadataRefused {
            request: 8,
            error: MetadataError::TooLarge { size_bytes: 1 << 50 },
        },
        Message::ClientWrite {
            request: 9,
            group,
            epoch,
            chunk,
            range,
            stamp: Stamp(5),
            data: bytes(0x11),
        },
        Message::ClientRead { request: 10, group, epoch, chunk, range },
        Message::ClientReply { request: 11, body: ReplyBody::Read { pieces: vec![piece.clone()] } },
        Message::ClientReply {
            request: 12,
            body: ReplyBody::Refused(RequestError::NotPrimary { known: Epoch(4) }),
        },
        Message::ClientReply {
            request: 13,
            body: ReplyBody::Refused(RequestError::NoSpace { server: ServerId(3) }),
        },
        Message::ReplicaWrite { group, epoch, write: write.clone(), stable: Version(3) },
        Message::ReplicaAck { group, epoch, version: Version(9) },
        Message::ReplicaRefused { group, epoch, known: Epoch(5) },
        Message::SyncRequest { group, epoch },
        Message::SyncReply { group, epoch, unstable: vec![write.clone()] },
        Message::RepairRead { group, epoch, chunk, range },
        Message::RepairData { group, epoch, chunk, range, pieces: None },
        Message::RebuildData { group, epoch, chunk, pieces: vec![piece, empty] },
        Message::RebuildAck { group, epoch, chunk },
        Message::RebuildDone { group, epoch, server: ServerId(6) },
        Message::RebuildRecorded { group, epoch, server: ServerId(6) },
        Message::WakeReplicas { group, epoch },
        Message::LogAppend { group, epoch, writes: vec![write.clone()] },
        Message::LogAck { group, epoch, versions: vec![Version(1), Version(2)] },
        Message::LogFull { group, epoch, versions: vec![Version(3)] },
        Message::LogRefused { group, epoch, known: Epoch(9) },
        Message::LogRecover { group, epoch },
        Message::LogRecovered { group, epoch, records: vec![record] },
        Message::LogRead { group, epoch, records: vec![record] },
        Message::LogData { group, epoch, writes: vec![(record, Some(write)), (record, None)] },
        Message::LogInvalidate { group, epoch, records: vec![record] },
        Message::LogInvalidated { group, epoch, records: vec![record] },
        Message::ListObjects {
            request: 8,
            prefix: "logs/".into(),
            start_after: Some("logs/a".into()),
            limit: 100,
            attrs: true,
        },
        Message::ObjectsListed {
            request: 8,
            objects: vec![ListedObject {
                name: "logs/b".into(),
                size_bytes: 4096,
                attrs: vec![1, 2],
            }],
            truncated: true,
        },
        Message::AllocateObject { request: 14, size_bytes: 8192 },
        Message::BindObject(Box::new(BindRequest {
            request: 15,
            name: "s3/k/b/key".into(),
            data: vec![ObjectId(44), ObjectId(45)],
            attrs: vec![7; 3],
            taking: vec!["s3/p/b/u/00001".into()],
            require: Some("s3/b/b".into()),
            condition: BindCondition::Generation(9),
        })),
        Message::DeleteObjects { request: 16, names: vec!["x".into(), "y".into()] },
        Message::CheckObjects {
            objects: vec![HeldObject {
                object: ObjectId(3),
                chunk_groups: vec![group],
                bytes: 4096,
            }],
        },
        Message::ClientReply { request: 17, body: ReplyBody::Refused(RequestError::Freed) },
        Message::ReleaseObject { request: 18, object: ObjectId(46) },
        Message::StableMark { group, epoch, stable: Version(9 << 40 | 4) },
        Message::WakeHolders { group, epoch, servers: vec![ServerId(4), ServerId(7)] },
        Message::ResyncPull { group, epoch, chunks: vec![chunk] },
        Message::ResyncHeld { group, epoch, chunks: vec![chunk] },
    ]
}

/// The variant's position in the enum: a new variant does not compile here until it
/// is numbered, and the test then wants a sample of it.
pub fn variant(message: &Message) -> usize {
    match message {
        Message::Heartbeat { .. } => 0,
        Message::HeartbeatReply(_) => 1,
        Message::GrantLease(_) => 2,
        Message::MigratePrimary { .. } => 3,
        Message::CancelLease { .. } => 4,
        Message::EnterStandby => 5,
        Message::Standby { .. } => 6,
        Message::StandbyAnswer { .. } => 7,
        Message::SetLoggerView { .. } => 8,
        Message::LoggerViewSet { .. } => 9,
        Message::CreateObject { .. } => 10,
        Message::LookupObject { .. } => 11,
        Message::DeleteObject { .. } => 12,
        Message::LookupGroup { .. } => 13,
        Message::ObjectFound { .. } => 14,
        Message::ObjectDeleted { .. } => 15,
        Message::GroupFound { .. } => 16,
        Message::MetadataRefused { .. } => 17,
        Message::ClientWrite { .. } => 18,
        Message::ClientRead { .. } => 19,
        Message::ClientReply { .. } => 20,
        Message::ReplicaWrite { .. } => 21,
        Message::ReplicaAck { .. } => 22,
        Message::ReplicaRefused { .. } => 23,
        Message::SyncRequest { .. } => 24,
        Message::SyncReply { .. } => 25,
        Message::RepairRead { .. } => 26,
        Message::RepairData { .. } => 27,
        Message::RebuildData { .. } => 28,
        Message::RebuildAck { .. } => 29,
        Message::RebuildDone { .. } => 30,
        Message::RebuildRecorded { .. } => 31,
        Message::WakeReplicas { .. } => 32,
        Message::LogAppend { .. } => 33,
        Message::LogAck { .. } => 34,
        Message::LogFull { .. } => 35,
        Message::LogRefused { .. } => 36,
        Message::LogRecover { .. } => 37,
        Message::LogRecovered { .. } => 38,
        Message::LogRead { .. } => 39,
        Message::LogData { .. } => 40,
        Message::LogInvalidate { .. } => 41,
        Message::LogInvalidated { .. } => 42,
        Message::ListObjects { .. } => 43,
        Message::ObjectsListed { .. } => 44,
        Message::AllocateObject { .. } => 45,
        Message::BindObject(_) => 46,
        Message::DeleteObjects { .. } => 47,
        Message::CheckObjects { .. } => 48,
        Message::ReleaseObject { .. } => 49,
        Message::StableMark { .. } => 50,
        Message::WakeHolders { .. } => 51,
        Message::ResyncPull { .. } => 52,
        Message::ResyncHeld { .. } => 53,
    }
}

/// Variants of [`Message`].
pub const VARIANTS: usize = 54;

//! A Kubernetes CRI client, enough of one to drive a pod's life the way
//! the kubelet does: gRPC over containerd's Unix socket, with the CRI v1
//! messages it sends (`runtime.v1`, k8s.io/cri-api's `api.proto`) declared
//! here, field numbers and all, through prost's derive. Only the fields
//! these tests set or read are declared; the server skips the others, as
//! protobuf decoders do.
//!
//! Why not a CRI crate: they generate their code with `protoc` at build
//! time, which a fresh clone's `cargo test` cannot count on.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tonic::codegen::http::uri::PathAndQuery;

#[derive(Clone, PartialEq, prost::Message)]
pub struct VersionRequest {
    #[prost(string, tag = "1")]
    pub version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct VersionResponse {
    #[prost(string, tag = "1")]
    pub version: String,
    #[prost(string, tag = "2")]
    pub runtime_name: String,
    #[prost(string, tag = "3")]
    pub runtime_version: String,
    #[prost(string, tag = "4")]
    pub runtime_api_version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub namespace: String,
    #[prost(uint32, tag = "4")]
    pub attempt: u32,
}

/// `NamespaceMode`: POD = 0, CONTAINER = 1, NODE = 2 (the host's), TARGET = 3.
pub const NAMESPACE_POD: i32 = 0;
pub const NAMESPACE_CONTAINER: i32 = 1;
pub const NAMESPACE_NODE: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub struct NamespaceOption {
    #[prost(int32, tag = "1")]
    pub network: i32,
    #[prost(int32, tag = "2")]
    pub pid: i32,
    #[prost(int32, tag = "3")]
    pub ipc: i32,
    /// `hostUsers: false`: a user namespace for the pod (CRI v1 since
    /// Kubernetes 1.27).
    #[prost(message, optional, tag = "5")]
    pub userns_options: Option<UserNamespace>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UserNamespace {
    #[prost(int32, tag = "1")]
    pub mode: i32,
    #[prost(message, repeated, tag = "2")]
    pub uids: Vec<IdMapping>,
    #[prost(message, repeated, tag = "3")]
    pub gids: Vec<IdMapping>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct IdMapping {
    #[prost(uint32, tag = "1")]
    pub host_id: u32,
    #[prost(uint32, tag = "2")]
    pub container_id: u32,
    #[prost(uint32, tag = "3")]
    pub length: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusRequest {
    #[prost(bool, tag = "1")]
    pub verbose: bool,
}

/// What the kubelet learns of the runtime's handlers (Kubernetes 1.30's
/// CRI; older runtimes send none).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusResponse {
    #[prost(message, repeated, tag = "3")]
    pub runtime_handlers: Vec<RuntimeHandler>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RuntimeHandler {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub features: Option<RuntimeHandlerFeatures>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RuntimeHandlerFeatures {
    #[prost(bool, tag = "1")]
    pub recursive_read_only_mounts: bool,
    #[prost(bool, tag = "2")]
    pub user_namespaces: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxSandboxSecurityContext {
    #[prost(message, optional, tag = "1")]
    pub namespace_options: Option<NamespaceOption>,
    #[prost(bool, tag = "6")]
    pub privileged: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandboxConfig {
    #[prost(string, tag = "1")]
    pub cgroup_parent: String,
    #[prost(message, optional, tag = "2")]
    pub security_context: Option<LinuxSandboxSecurityContext>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxConfig {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(string, tag = "2")]
    pub hostname: String,
    #[prost(string, tag = "3")]
    pub log_directory: String,
    #[prost(map = "string, string", tag = "6")]
    pub labels: HashMap<String, String>,
    #[prost(map = "string, string", tag = "7")]
    pub annotations: HashMap<String, String>,
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxRequest {
    #[prost(message, optional, tag = "1")]
    pub config: Option<PodSandboxConfig>,
    #[prost(string, tag = "2")]
    pub runtime_handler: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxResponse {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxIdRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(uint32, tag = "2")]
    pub attempt: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageSpec {
    #[prost(string, tag = "1")]
    pub image: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Mount {
    #[prost(string, tag = "1")]
    pub container_path: String,
    #[prost(string, tag = "2")]
    pub host_path: String,
    #[prost(bool, tag = "3")]
    pub readonly: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Device {
    #[prost(string, tag = "1")]
    pub container_path: String,
    #[prost(string, tag = "2")]
    pub host_path: String,
    #[prost(string, tag = "3")]
    pub permissions: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerResources {
    #[prost(int64, tag = "1")]
    pub cpu_period: i64,
    #[prost(int64, tag = "2")]
    pub cpu_quota: i64,
    #[prost(int64, tag = "3")]
    pub cpu_shares: i64,
    #[prost(int64, tag = "4")]
    pub memory_limit_in_bytes: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Capability {
    #[prost(string, repeated, tag = "1")]
    pub add_capabilities: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerSecurityContext {
    #[prost(message, optional, tag = "1")]
    pub capabilities: Option<Capability>,
    #[prost(bool, tag = "2")]
    pub privileged: bool,
    #[prost(message, optional, tag = "3")]
    pub namespace_options: Option<NamespaceOption>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerConfig {
    #[prost(message, optional, tag = "1")]
    pub resources: Option<LinuxContainerResources>,
    #[prost(message, optional, tag = "2")]
    pub security_context: Option<LinuxContainerSecurityContext>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerConfig {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ContainerMetadata>,
    #[prost(message, optional, tag = "2")]
    pub image: Option<ImageSpec>,
    #[prost(string, repeated, tag = "3")]
    pub command: Vec<String>,
    #[prost(string, repeated, tag = "4")]
    pub args: Vec<String>,
    #[prost(string, tag = "5")]
    pub working_dir: String,
    #[prost(message, repeated, tag = "6")]
    pub envs: Vec<KeyValue>,
    #[prost(message, repeated, tag = "7")]
    pub mounts: Vec<Mount>,
    #[prost(message, repeated, tag = "8")]
    pub devices: Vec<Device>,
    #[prost(map = "string, string", tag = "10")]
    pub annotations: HashMap<String, String>,
    #[prost(string, tag = "11")]
    pub log_path: String,
    #[prost(message, optional, tag = "15")]
    pub linux: Option<LinuxContainerConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
    #[prost(message, optional, tag = "2")]
    pub config: Option<ContainerConfig>,
    #[prost(message, optional, tag = "3")]
    pub sandbox_config: Option<PodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerResponse {
    #[prost(string, tag = "1")]
    pub container_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerIdRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StopContainerRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(int64, tag = "2")]
    pub timeout: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExecSyncRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(string, repeated, tag = "2")]
    pub cmd: Vec<String>,
    #[prost(int64, tag = "3")]
    pub timeout: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExecSyncResponse {
    #[prost(bytes = "vec", tag = "1")]
    pub stdout: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub stderr: Vec<u8>,
    #[prost(int32, tag = "3")]
    pub exit_code: i32,
}

/// `ContainerState`: CREATED = 0, RUNNING = 1, EXITED = 2, UNKNOWN = 3.
pub const CONTAINER_EXITED: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatus {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(int32, tag = "3")]
    pub state: i32,
    #[prost(int32, tag = "7")]
    pub exit_code: i32,
    #[prost(string, tag = "10")]
    pub reason: String,
    #[prost(string, tag = "11")]
    pub message: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStatusResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<ContainerStatus>,
}

/// A blocking CRI client on a containerd socket.
pub struct Cri {
    runtime: tokio::runtime::Runtime,
    channel: tonic::transport::Channel,
}

impl Cri {
    /// Connect to the CRI on the Unix socket `socket`.
    pub fn connect(socket: &Path) -> Result<Cri, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|err| format!("tokio: {err}"))?;
        let socket: PathBuf = socket.to_owned();
        // The URI is a placeholder: every connection goes to the socket.
        let channel = runtime
            .block_on(
                tonic::transport::Endpoint::from_static("http://cri.invalid")
                    .connect_with_connector(tower::service_fn(move |_| {
                        let socket = socket.clone();
                        async move {
                            let stream = tokio::net::UnixStream::connect(socket).await?;
                            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                        }
                    })),
            )
            .map_err(|err| format!("connecting to the CRI socket: {err}"))?;
        Ok(Cri { runtime, channel })
    }

    /// One unary call of `service` (`RuntimeService`), `method`; an error
    /// is the gRPC status's code and message, as the kubelet reports it in
    /// a pod's events.
    pub fn call<Request, Response>(
        &self,
        method: &str,
        request: Request,
    ) -> Result<Response, String>
    where
        Request: prost::Message + Send + Sync + 'static,
        Response: prost::Message + Default + Send + Sync + 'static,
    {
        let path = PathAndQuery::try_from(format!("/runtime.v1.RuntimeService/{method}"))
            .map_err(|err| err.to_string())?;
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        self.runtime.block_on(async move {
            grpc.ready()
                .await
                .map_err(|err| format!("{method}: not ready: {err}"))?;
            let codec = tonic_prost::ProstCodec::<Request, Response>::default();
            grpc.unary(tonic::Request::new(request), path, codec)
                .await
                .map(tonic::Response::into_inner)
                .map_err(|status| format!("{method}: {:?}: {}", status.code(), status.message()))
        })
    }

    pub fn version(&self) -> Result<VersionResponse, String> {
        self.call(
            "Version",
            VersionRequest {
                version: "v1".into(),
            },
        )
    }

    pub fn status(&self) -> Result<StatusResponse, String> {
        self.call("Status", StatusRequest { verbose: false })
    }

    pub fn run_pod(&self, config: &PodSandboxConfig, handler: &str) -> Result<String, String> {
        let response: RunPodSandboxResponse = self.call(
            "RunPodSandbox",
            RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: handler.into(),
            },
        )?;
        Ok(response.pod_sandbox_id)
    }

    pub fn stop_pod(&self, pod: &str) -> Result<(), String> {
        let _: Empty = self.call(
            "StopPodSandbox",
            PodSandboxIdRequest {
                pod_sandbox_id: pod.into(),
            },
        )?;
        Ok(())
    }

    pub fn remove_pod(&self, pod: &str) -> Result<(), String> {
        let _: Empty = self.call(
            "RemovePodSandbox",
            PodSandboxIdRequest {
                pod_sandbox_id: pod.into(),
            },
        )?;
        Ok(())
    }

    pub fn create_container(
        &self,
        pod: &str,
        config: &ContainerConfig,
        pod_config: &PodSandboxConfig,
    ) -> Result<String, String> {
        let response: CreateContainerResponse = self.call(
            "CreateContainer",
            CreateContainerRequest {
                pod_sandbox_id: pod.into(),
                config: Some(config.clone()),
                sandbox_config: Some(pod_config.clone()),
            },
        )?;
        Ok(response.container_id)
    }

    pub fn start_container(&self, container: &str) -> Result<(), String> {
        let _: Empty = self.call(
            "StartContainer",
            ContainerIdRequest {
                container_id: container.into(),
            },
        )?;
        Ok(())
    }

    pub fn stop_container(&self, container: &str, timeout: i64) -> Result<(), String> {
        let _: Empty = self.call(
            "StopContainer",
            StopContainerRequest {
                container_id: container.into(),
                timeout,
            },
        )?;
        Ok(())
    }

    pub fn remove_container(&self, container: &str) -> Result<(), String> {
        let _: Empty = self.call(
            "RemoveContainer",
            ContainerIdRequest {
                container_id: container.into(),
            },
        )?;
        Ok(())
    }

    pub fn container_status(&self, container: &str) -> Result<ContainerStatus, String> {
        let response: ContainerStatusResponse = self.call(
            "ContainerStatus",
            ContainerIdRequest {
                container_id: container.into(),
            },
        )?;
        response
            .status
            .ok_or_else(|| "ContainerStatus: no status".to_owned())
    }

    /// `kubectl exec` without a terminal: the kubelet's ExecSync.
    pub fn exec_sync(&self, container: &str, cmd: &[&str]) -> Result<ExecSyncResponse, String> {
        self.call(
            "ExecSync",
            ExecSyncRequest {
                container_id: container.into(),
                cmd: cmd.iter().map(|c| (*c).to_owned()).collect(),
                timeout: 0,
            },
        )
    }
}

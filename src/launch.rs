//! `sandbox __launch --fd N` (internal): the fork server `sandbox daemon`
//! starts before its threads, see `sandbox::launch`.
use clap::Args;

/// Arguments of `sandbox __launch`.
#[derive(Debug, Args)]
pub struct LaunchArgs {
    /// The inherited SOCK_SEQPACKET socket to the daemon.
    #[arg(long, value_name = "N")]
    pub fd: i32,
}

pub fn run(args: LaunchArgs) -> anyhow::Result<i32> {
    let control = sandbox::os::adopt_inherited_socket(args.fd).map_err(|errno| {
        anyhow::anyhow!(
            "__launch --fd {}: not an inherited socket ({}); this command is started by `sandbox daemon`",
            args.fd,
            errno.desc()
        )
    })?;
    nix::fcntl::fcntl(
        &control,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )?;
    sandbox::launch::launcher::serve(control)?;
    Ok(0)
}

//! Directories a network client names, confined under a root the server chose.
//!
//! PPO+D's `DemoService.Configure` names the directories the replay server reads demos from
//! and writes the best ones to. Those names are data from the network: a [`Root`] turns each
//! into a path under the server's `--demos-root`, or refuses it. A relative name is taken
//! relative to the root; an absolute one must already lie under it; `..` is refused outright;
//! and symbolic links are followed before the check, so a link that leads out is refused too.
//! A directory that does not exist yet is judged by its deepest existing ancestor, so a
//! refused name is never created.

use std::path::{Component, Path, PathBuf};

/// Why a client's directory name was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The name leads out of the root (an absolute path elsewhere, `..`, a symbolic link).
    #[error("directory {requested:?} is outside {root} (the server's {flag}); name one under it")]
    Outside {
        /// The name as the client sent it.
        requested: String,
        /// The root, canonical.
        root: PathBuf,
        /// The server flag that sets the root, for the message.
        flag: &'static str,
    },
    /// The name leads into a directory under the root that the server keeps for itself.
    #[error("directory {requested:?} is inside {reserved}, which the server keeps for itself")]
    Reserved {
        /// The name as the client sent it.
        requested: String,
        /// The reserved directory, canonical.
        reserved: PathBuf,
    },
    /// The file system refused a look-up or the creation of the directory.
    #[error("directory {requested:?} under {root}: {cause}")]
    Io {
        /// The name as the client sent it.
        requested: String,
        /// The root, canonical.
        root: PathBuf,
        /// What the OS said.
        cause: std::io::Error,
    },
}

/// A canonical directory that client-named directories must stay under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    dir: PathBuf,
    flag: &'static str,
    reserved: Vec<PathBuf>,
}

impl Root {
    /// The root at `dir` (created if missing), named in errors after the server flag `flag`.
    pub fn new(dir: &Path, flag: &'static str) -> std::io::Result<Root> {
        std::fs::create_dir_all(dir)?;
        Ok(Root {
            dir: dir.canonicalize()?,
            flag,
            reserved: Vec::new(),
        })
    }

    /// The same root with `dir` (the server's checkpoints, say) and everything under it
    /// refused.
    pub fn reserving(mut self, dir: &Path) -> std::io::Result<Root> {
        self.reserved.push(real_path(dir)?);
        Ok(self)
    }

    /// The root's canonical path.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Where `requested` lies under the root, whether or not it exists yet; refused when it
    /// leads out of the root.
    pub fn resolve(&self, requested: &str) -> Result<PathBuf, ConfineError> {
        let path = Path::new(requested);
        if path.components().any(|c| c == Component::ParentDir) {
            return Err(self.outside(requested));
        }
        let real = real_path(&self.dir.join(path)).map_err(|e| self.io(requested, e))?;
        if !real.starts_with(&self.dir) {
            return Err(self.outside(requested));
        }
        if let Some(reserved) = self.reserved.iter().find(|r| real.starts_with(r)) {
            return Err(ConfineError::Reserved {
                requested: requested.to_string(),
                reserved: reserved.clone(),
            });
        }
        Ok(real)
    }

    /// [`Root::resolve`], then the directory is created if missing and checked again (a link
    /// made between the two steps is caught).
    pub fn create(&self, requested: &str) -> Result<PathBuf, ConfineError> {
        let path = self.resolve(requested)?;
        std::fs::create_dir_all(&path).map_err(|e| self.io(requested, e))?;
        self.resolve(requested)
    }

    fn outside(&self, requested: &str) -> ConfineError {
        ConfineError::Outside {
            requested: requested.to_string(),
            root: self.dir.clone(),
            flag: self.flag,
        }
    }

    fn io(&self, requested: &str, cause: std::io::Error) -> ConfineError {
        ConfineError::Io {
            requested: requested.to_string(),
            root: self.dir.clone(),
            cause,
        }
    }
}

/// `path` with its deepest existing ancestor canonical (links followed) and the components
/// that do not exist yet after it.
fn real_path(path: &Path) -> std::io::Result<PathBuf> {
    let (existing, rest) = split_existing(path);
    Ok(existing.canonicalize()?.join(rest))
}

/// `path`'s deepest ancestor (itself included) that exists, and the components after it.
fn split_existing(path: &Path) -> (&Path, PathBuf) {
    let mut existing = path;
    let mut rest = Vec::new();
    while existing.symlink_metadata().is_err() {
        let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
            break;
        };
        rest.push(name);
        existing = parent;
    }
    (existing, rest.iter().rev().collect())
}

/// For a launcher that starts a server for its own config: makes each non-empty directory
/// name real and absolute (against the working directory, which the roles it starts share,
/// so the names keep their meaning) and returns the deepest directory that holds them all,
/// the server's root (the working directory when every name is empty).
pub fn absolute_under_one_root<'a>(
    names: impl IntoIterator<Item = &'a mut String>,
) -> std::io::Result<PathBuf> {
    let cwd = std::env::current_dir()?;
    let mut dirs = Vec::new();
    for name in names.into_iter().filter(|n| !n.is_empty()) {
        let real = real_path(&cwd.join(&*name))?;
        *name = real.display().to_string();
        dirs.push(real);
    }
    Ok(common_ancestor(dirs.iter().map(PathBuf::as_path)).unwrap_or(cwd))
}

/// The deepest directory that holds every one of `dirs` (absolute paths), or `None` when
/// `dirs` is empty.
fn common_ancestor<'a>(dirs: impl IntoIterator<Item = &'a Path>) -> Option<PathBuf> {
    let mut common: Option<PathBuf> = None;
    for dir in dirs {
        common = Some(match common {
            None => dir.to_path_buf(),
            Some(c) => c
                .components()
                .zip(dir.components())
                .take_while(|(a, b)| a == b)
                .map(|(a, _)| a)
                .collect(),
        });
    }
    common
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("fleetrl-confine-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.canonicalize().unwrap()
    }

    #[test]
    fn names_under_the_root_resolve_and_the_rest_are_refused() {
        let base = tempdir("resolve");
        let root = Root::new(&base.join("root"), "--demos-root").unwrap();
        std::fs::create_dir_all(root.path().join("human")).unwrap();
        std::os::unix::fs::symlink("/etc", root.path().join("out")).unwrap();
        std::os::unix::fs::symlink(root.path().join("human"), root.path().join("in")).unwrap();

        assert_eq!(root.resolve("human").unwrap(), root.path().join("human"));
        assert_eq!(root.resolve("in").unwrap(), root.path().join("human"));
        let inside = root.path().join("new/deeper");
        assert_eq!(root.resolve(&inside.display().to_string()).unwrap(), inside);
        assert!(!inside.exists(), "resolve creates nothing");
        for escape in [
            "/etc",
            "../root/human",
            "human/../../x",
            "out",
            "out/new",
            "/",
        ] {
            let err = root.resolve(escape).unwrap_err();
            let message = err.to_string();
            assert!(
                matches!(err, ConfineError::Outside { .. }),
                "{escape}: {message}"
            );
            assert!(message.contains(escape), "{message}");
            assert!(
                message.contains(&root.path().display().to_string()),
                "{message}"
            );
        }
        let human = root.path().join("human");
        let root = root.reserving(&human).unwrap();
        let err = root.resolve("in/x").unwrap_err();
        assert!(matches!(err, ConfineError::Reserved { .. }), "{err}");
        assert!(root.create("out/new").is_err());
        assert!(!Path::new("/etc/new").exists());
        assert_eq!(root.create("top").unwrap(), root.path().join("top"));
        assert!(root.path().join("top").is_dir());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_common_ancestor_holds_every_directory() {
        let dirs = [
            Path::new("/a/b/c"),
            Path::new("/a/b/d/e"),
            Path::new("/a/b"),
        ];
        assert_eq!(common_ancestor(dirs), Some(PathBuf::from("/a/b")));
        assert_eq!(
            common_ancestor([Path::new("/x/y")]),
            Some(PathBuf::from("/x/y"))
        );
        assert_eq!(common_ancestor(Vec::<&Path>::new()), None);
    }
}

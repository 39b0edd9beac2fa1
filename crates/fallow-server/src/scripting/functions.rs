//! Redis 7 function libraries: what FUNCTION LOAD registered, shared by every worker. The code of each
//! library is kept here; each worker's Lua state loads a library on its first FCALL of it (and again
//! when the library is replaced: `Library::version`), so functions run on whichever worker serves the
//! client. Library code is bounded in bytes, as the script cache is.
use super::{KeyHabit, ScriptFlags};
use parking_lot::RwLock;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Bytes of library code all libraries together may hold.
pub const LIBRARY_CODE_BYTES_MAX: usize = 64 << 20;

/// One registered function.
#[derive(Debug)]
pub struct FunctionMeta {
    pub name: String,
    pub description: Option<String>,
    pub flags: ScriptFlags,
    pub habit: KeyHabit,
}

/// One loaded library.
#[derive(Debug)]
pub struct Library {
    pub name: String,
    pub code: Arc<[u8]>,
    /// In registration order.
    pub functions: Vec<Arc<FunctionMeta>>,
    /// Unique per load: a worker whose state loaded another version loads this one again.
    pub version: u64,
}

/// A function as FUNCTION LOAD found it, before it is registered.
pub struct Registered {
    pub name: String,
    pub description: Option<String>,
    pub flags: ScriptFlags,
}

#[derive(Default)]
struct Registry {
    /// By name, so FUNCTION LIST is in name order.
    libraries: BTreeMap<String, Arc<Library>>,
    functions: HashMap<String, (Arc<Library>, Arc<FunctionMeta>)>,
    code_bytes: usize,
    next_version: u64,
}

#[derive(Default)]
pub struct Libraries {
    registry: RwLock<Registry>,
}

impl Libraries {
    /// The function `name` with its library.
    pub fn function(&self, name: &str) -> Option<(Arc<Library>, Arc<FunctionMeta>)> {
        self.registry.read().functions.get(name).cloned()
    }

    /// Adds (or with `replace`, replaces) library `name`. Err is Redis's error reply: the library exists,
    /// or a function name is another library's.
    pub fn add(
        &self,
        name: &str,
        code: &[u8],
        functions: Vec<Registered>,
        replace: bool,
    ) -> Result<Arc<Library>, String> {
        let mut registry = self.registry.write();
        let old = registry.libraries.get(name).cloned();
        if old.is_some() && !replace {
            return Err(format!("ERR Library '{name}' already exists"));
        }
        for function in &functions {
            if let Some((owner, _)) = registry.functions.get(&function.name) {
                if owner.name != name {
                    return Err(format!("ERR Function {} already exists", function.name));
                }
            }
        }
        let freed = old.as_ref().map_or(0, |old| old.code.len());
        if registry.code_bytes - freed + code.len() > LIBRARY_CODE_BYTES_MAX {
            return Err(format!(
                "ERR function libraries would pass {LIBRARY_CODE_BYTES_MAX} bytes of code"
            ));
        }
        if let Some(old) = old {
            registry.remove(&old);
        }
        registry.next_version += 1;
        let library = Arc::new(Library {
            name: name.to_string(),
            code: code.into(),
            functions: functions
                .into_iter()
                .map(|function| {
                    Arc::new(FunctionMeta {
                        name: function.name,
                        description: function.description,
                        flags: function.flags,
                        habit: KeyHabit::default(),
                    })
                })
                .collect(),
            version: registry.next_version,
        });
        registry.insert(library.clone());
        Ok(library)
    }

    /// Whether `batch` (library names with their functions) can be added together (FUNCTION RESTORE: all
    /// or none). Err is Redis's reply for the first collision.
    pub fn check_batch(
        &self,
        batch: &[(&str, &[Registered])],
        replace: bool,
    ) -> Result<(), String> {
        let registry = self.registry.read();
        let mut batch_functions = std::collections::HashSet::new();
        for (name, functions) in batch {
            if !replace && registry.libraries.contains_key(*name) {
                return Err(format!("ERR Library {name} already exists"));
            }
            for function in *functions {
                let owned_elsewhere = registry
                    .functions
                    .get(&function.name)
                    .is_some_and(|(owner, _)| owner.name != *name);
                if owned_elsewhere || !batch_functions.insert(function.name.as_str()) {
                    return Err(format!("ERR Function {} already exists", function.name));
                }
            }
        }
        Ok(())
    }

    /// Removes library `name`; false when there is none.
    pub fn delete(&self, name: &str) -> bool {
        let mut registry = self.registry.write();
        let Some(library) = registry.libraries.get(name).cloned() else {
            return false;
        };
        registry.remove(&library);
        true
    }

    pub fn flush(&self) {
        let mut registry = self.registry.write();
        let next_version = registry.next_version;
        *registry = Registry {
            next_version,
            ..Registry::default()
        };
    }

    /// Whether library `name` is registered in `version` (a worker's loaded copy is still good).
    pub fn is_current(&self, name: &str, version: u64) -> bool {
        let registry = self.registry.read();
        matches!(registry.libraries.get(name), Some(library) if library.version == version)
    }

    /// Every library, in name order.
    pub fn list(&self) -> Vec<Arc<Library>> {
        self.registry.read().libraries.values().cloned().collect()
    }

    /// Bytes of library code held.
    pub fn code_bytes(&self) -> usize {
        self.registry.read().code_bytes
    }

    /// (libraries, functions).
    pub fn counts(&self) -> (usize, usize) {
        let registry = self.registry.read();
        (registry.libraries.len(), registry.functions.len())
    }
}

impl Registry {
    fn insert(&mut self, library: Arc<Library>) {
        self.code_bytes += library.code.len();
        for function in &library.functions {
            self.functions
                .insert(function.name.clone(), (library.clone(), function.clone()));
        }
        self.libraries.insert(library.name.clone(), library);
    }

    fn remove(&mut self, library: &Arc<Library>) {
        self.code_bytes -= library.code.len();
        for function in &library.functions {
            self.functions.remove(&function.name);
        }
        self.libraries.remove(&library.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registered(names: &[&str]) -> Vec<Registered> {
        names
            .iter()
            .map(|name| Registered {
                name: name.to_string(),
                description: None,
                flags: ScriptFlags::default(),
            })
            .collect()
    }

    #[test]
    fn libraries_own_their_function_names() {
        let libraries = Libraries::default();
        let first = libraries
            .add("lib1", b"code", registered(&["f", "g"]), false)
            .unwrap();
        assert_eq!(libraries.counts(), (1, 2));
        assert_eq!(
            libraries
                .add("lib1", b"code", registered(&["h"]), false)
                .unwrap_err(),
            "ERR Library 'lib1' already exists"
        );
        assert_eq!(
            libraries
                .add("lib2", b"code", registered(&["g"]), false)
                .unwrap_err(),
            "ERR Function g already exists"
        );
        let replaced = libraries
            .add("lib1", b"code2", registered(&["h"]), true)
            .unwrap();
        assert!(replaced.version > first.version);
        assert!(
            libraries.function("f").is_none(),
            "a replaced library's functions go"
        );
        assert_eq!(libraries.function("h").unwrap().0.name, "lib1");
        assert!(libraries.delete("lib1"));
        assert!(!libraries.delete("lib1"));
        assert_eq!(libraries.counts(), (0, 0));
    }

    #[test]
    fn library_code_is_bounded() {
        let libraries = Libraries::default();
        let big = vec![b'-'; LIBRARY_CODE_BYTES_MAX / 2 + 1];
        libraries
            .add("a", &big, registered(&["fa"]), false)
            .unwrap();
        assert!(libraries
            .add("b", &big, registered(&["fb"]), false)
            .is_err());
        libraries.add("a", &big, registered(&["fa"]), true).unwrap();
        libraries.flush();
        libraries
            .add("b", &big, registered(&["fb"]), false)
            .unwrap();
    }
}

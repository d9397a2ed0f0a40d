//! Pinning load-generator threads to CPUs (`--pin`), so that on a small machine the server
//! and the generator do not share a core.

use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use std::fmt;
use std::str::FromStr;

/// A list of CPUs as `taskset -c` takes it: `1`, `0,2`, `0-3,6`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(Vec<usize>);

impl CpuList {
    /// The CPU for generator thread `thread`: threads take the listed CPUs in turn.
    pub fn cpu_for(&self, thread: usize) -> usize {
        self.0[thread % self.0.len()]
    }
}

impl FromStr for CpuList {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let cpu =
            |part: &str| part.trim().parse::<usize>().map_err(|_| format!("bad CPU {part:?} in {text:?}"));
        let mut cpus = Vec::new();
        for item in text.split(',') {
            match item.split_once('-') {
                Some((first, last)) => {
                    let (first, last) = (cpu(first)?, cpu(last)?);
                    if first > last {
                        return Err(format!("empty CPU range {item:?}"));
                    }
                    cpus.extend(first..=last);
                }
                None => cpus.push(cpu(item)?),
            }
        }
        Ok(CpuList(cpus))
    }
}

impl fmt::Display for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cpus: Vec<String> = self.0.iter().map(usize::to_string).collect();
        f.write_str(&cpus.join(","))
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<(), String> {
    let mut set = CpuSet::new();
    set.set(cpu).map_err(|e| format!("cannot pin to CPU {cpu}: {e}"))?;
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| format!("cannot pin to CPU {cpu}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_like_taskset() {
        assert_eq!("1".parse(), Ok(CpuList(vec![1])));
        assert_eq!("0-2,5".parse(), Ok(CpuList(vec![0, 1, 2, 5])));
        for bad in ["", "a", "3-1", "1,,2"] {
            assert!(bad.parse::<CpuList>().is_err(), "{bad:?} accepted");
        }
        let list: CpuList = "4,6".parse().unwrap();
        assert_eq!((list.cpu_for(0), list.cpu_for(1), list.cpu_for(2)), (4, 6, 4));
        assert_eq!(list.to_string(), "4,6");
    }

    #[test]
    fn a_thread_can_be_pinned_to_a_cpu_it_may_run_on() {
        let allowed = nix::sched::sched_getaffinity(Pid::from_raw(0)).unwrap();
        let cpu = (0..CpuSet::count()).find(|&cpu| allowed.is_set(cpu).unwrap()).unwrap();
        std::thread::spawn(move || {
            pin_current_thread(cpu).unwrap();
            assert!(pin_current_thread(usize::MAX).is_err());
        })
        .join()
        .unwrap();
    }
}

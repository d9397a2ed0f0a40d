pub fn run(_a: BenchArgs) -> Result<(), String> { Ok(()) }
#[derive(clap::Args)] pub struct BenchArgs {}

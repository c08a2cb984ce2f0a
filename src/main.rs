fn main() {
    snapview::threads::free_large_blocks_at_once();
    std::process::exit(snapview::cli::main());
}

fn main() {
    std::process::exit(snapview::cli::main());
}

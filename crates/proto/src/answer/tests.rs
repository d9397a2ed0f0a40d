use super::*;

/// The answer `frame` finds, which must not be found in any shorter prefix; cut short, the
/// bytes are "not all there" (or garbage already).
fn read(bytes: &[u8], shape: Shape) -> std::io::Result<Vec<u8>> {
    let found = frame(bytes, shape, 1000)?;
    let Frame { len, answer } = found.ok_or(Error::from(ErrorKind::UnexpectedEof))?;
    for cut in 0..len {
        assert!(!matches!(frame(&bytes[..cut], shape, 1000), Ok(Some(_))), "found in {cut} bytes");
    }
    assert_eq!(resumed(bytes, shape, &Limits::values(1000), 1).unwrap(), Some(Frame { len, answer }));
    Ok(bytes[..answer].to_vec())
}

/// What one [`Framer`] finds when it is handed `bytes` `step` more bytes at a time (as reads
/// bring them), checked against [`frame_within`] of each prefix.
fn resumed(bytes: &[u8], shape: Shape, limits: &Limits, step: usize) -> std::io::Result<Option<Frame>> {
    let mut framer = Framer::default();
    let mut cut = 0;
    loop {
        cut = (cut + step).min(bytes.len());
        let once = frame_within(&bytes[..cut], shape, limits);
        let found = framer.frame(&bytes[..cut], shape, limits);
        match (&found, &once) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{cut} bytes of {:?}", String::from_utf8_lossy(bytes)),
            (Err(_), Err(_)) => {}
            _ => panic!("resumed {found:?}, whole {once:?} at {cut} of {:?}", String::from_utf8_lossy(bytes)),
        }
        if !matches!(found, Ok(None)) || cut == bytes.len() {
            if !matches!(found, Ok(None)) {
                assert_eq!(framer, Framer::default(), "a framer starts over after an answer or error");
            }
            return found;
        }
    }
}

#[test]
fn a_framer_resumes_where_the_last_read_stopped() {
    let answers: [(&[u8], Shape); 9] = [
        (b"VALUE a 0 2\r\nhi\r\nVALUE bb 1 0 7\r\n\r\nLVALUE c 5 0 3\r\nxyz\r\nEND\r\nnext", Shape::Values),
        (b"SERVER_ERROR out of memory\r\n", Shape::Values),
        (b"VALUE a 0 2\r\nhiEND\r\n", Shape::Values),
        (b"VALUE a 0 2\r\nhi\r\nNOPE\r\n", Shape::Values),
        (b"STAT a 1\r\nSTAT b 2\r\nEND\r\n", Shape::Stats),
        (b"STAT a 1\r\nSTAT b 2\r\nSTAT c 3\r\nEND\r\n", Shape::Stats),
        (b"VA 10 t\r\n0123456789\r\n", Shape::Meta),
        (b"HD\r\n", Shape::Meta),
        (b"a line\nwithout its return\r\n", Shape::Line),
    ];
    let limits = Limits { line: 24, value: 16, stat_lines: 2 };
    for (bytes, shape) in answers {
        let whole = frame_within(bytes, shape, &limits);
        for step in 1..=bytes.len() {
            let found = resumed(bytes, shape, &limits, step);
            assert_eq!(found.is_err(), whole.is_err(), "{step}: {found:?}");
        }
    }
    // A line past the limit fails however it arrives.
    assert!(resumed(&[b'x'; 100], Shape::Line, &limits, 7).is_err());

    // What was framed stays framed: after a read that brought two whole blocks, the framer
    // starts at the third, and a read that brings nothing new searches nothing again.
    let bytes = b"VALUE a 0 1\r\nx\r\nVALUE b 0 1\r\ny\r\nVALUE c 0 1\r\nz";
    let mut framer = Framer::default();
    assert_eq!(framer.frame(bytes, Shape::Values, &limits).unwrap(), None);
    assert_eq!(framer.at, 32);
    assert_eq!(framer.scanned, 44, "the third block's newline");
    assert_eq!(framer.frame(bytes, Shape::Values, &limits).unwrap(), None);
    assert_eq!((framer.at, framer.scanned), (32, 44));
    let whole = [&bytes[..], b"\r\nEND\r\n"].concat();
    assert_eq!(framer.frame(&whole, Shape::Values, &limits).unwrap(), Some(Frame { len: 53, answer: 48 }));
    assert_eq!(framer, Framer::default());

    // A reader that gives up on an answer starts the next one afresh.
    assert_eq!(framer.frame(b"STAT a 1\r\nST", Shape::Stats, &limits).unwrap(), None);
    framer.reset();
    assert_eq!(framer.frame(b"OK\r\n", Shape::Line, &limits).unwrap(), Some(Frame { len: 4, answer: 4 }));
}

#[test]
fn answers_of_each_shape() {
    assert_eq!(read(b"STORED\r\nextra", Shape::Line).unwrap(), b"STORED\r\n");
    assert_eq!(read(b"VALUE k 0 2 9\r\nhi\r\nEND\r\n", Shape::Values).unwrap(), b"VALUE k 0 2 9\r\nhi\r\n");
    assert_eq!(read(b"END\r\n", Shape::Values).unwrap(), b"");
    // A key is bytes: one that is not UTF-8 frames like any other.
    assert_eq!(
        read(b"VALUE k\xff 0 2\r\nhi\r\nEND\r\n", Shape::Values).unwrap(),
        b"VALUE k\xff 0 2\r\nhi\r\n"
    );
    assert_eq!(read(b"LVALUE k 5 0 0\r\n\r\nEND\r\n", Shape::Values).unwrap(), b"LVALUE k 5 0 0\r\n\r\n");
    assert_eq!(read(b"SERVER_ERROR busy\r\n", Shape::Values).unwrap(), b"SERVER_ERROR busy\r\n");
    assert_eq!(read(b"VA 2 f1\r\nhi\r\n", Shape::Meta).unwrap(), b"VA 2 f1\r\nhi\r\n");
    assert_eq!(read(b"EN\r\n", Shape::Meta).unwrap(), b"EN\r\n");
    assert_eq!(
        read(b"STAT a 1\r\nSTAT b 2 3\r\nEND\r\nx", Shape::Stats).unwrap(),
        b"STAT a 1\r\nSTAT b 2 3\r\n"
    );
    assert_eq!(read(b"END\r\n", Shape::Stats).unwrap(), b"");
    assert_eq!(read(b"OK\r\n", Shape::Stats).unwrap(), b"OK\r\n");
    assert_eq!(
        read(b"SERVER_ERROR no such tenant\r\n", Shape::Stats).unwrap(),
        b"SERVER_ERROR no such tenant\r\n"
    );
}

#[test]
fn garbage_and_oversize_are_refused() {
    for (bytes, shape) in [
        (&b"VALUE k 0 5000\r\n"[..], Shape::Values),
        (b"HELLO\r\n", Shape::Values),
        (b"VALUE k 0 2\r\nhiXX", Shape::Values),
        (b"VA x\r\n", Shape::Meta),
        (b"no newline", Shape::Line),
        (b"bare\n", Shape::Line),
        (b"STAT a 1\r\nVALUE k 0 1\r\n", Shape::Stats),
    ] {
        let e = read(bytes, shape).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::InvalidData | ErrorKind::UnexpectedEof), "{e}");
    }
    let long = vec![b'x'; MAX_ANSWER_LINE + 10];
    assert_eq!(read(&long, Shape::Line).unwrap_err().kind(), ErrorKind::InvalidData);
}

#[test]
fn limits_bound_lines_and_their_count() {
    let limits = Limits { line: 10, value: 5, stat_lines: 2 };
    let frame = |bytes: &[u8], shape| frame_within(bytes, shape, &limits);
    assert!(frame(b"STAT a 1\r\n", Shape::Stats).unwrap().is_none());
    assert_eq!(frame(b"0123456\r\n", Shape::Line).unwrap(), Some(Frame { len: 9, answer: 9 }));
    assert_eq!(frame(b"01234567\r\n", Shape::Line).unwrap(), Some(Frame { len: 10, answer: 10 }));
    assert!(frame(b"012345678\r\n", Shape::Line).is_err(), "11 bytes with its \\r\\n");
    assert!(frame(b"STAT a 1\r\nSTAT b 2\r\nEND\r\n", Shape::Stats).unwrap().is_some());
    let three = frame(b"STAT a 1\r\nSTAT b 2\r\nSTAT c 3\r\n", Shape::Stats).unwrap_err();
    assert!(three.to_string().contains("more than 2 STAT lines"), "{three}");
    assert!(frame(b"VA 6\r\n", Shape::Meta).is_err());
}

#[test]
fn framed_answers_read_back_as_blocks_lines_and_stats() {
    let answer = b"VALUE a 1 2 7\r\nhi\r\nLVALUE b 9 0 0\r\n\r\nVALUE c 0 4\r\n\r\n\r\n\r\n";
    let found: Vec<Block> = blocks(answer).collect();
    assert_eq!(
        found,
        [
            Block { line: b"VALUE a 1 2 7", key: b"a", data: b"hi" },
            Block { line: b"LVALUE b 9 0 0", key: b"b", data: b"" },
            Block { line: b"VALUE c 0 4", key: b"c", data: b"\r\n\r\n" },
        ]
    );
    assert_eq!(blocks(b"SERVER_ERROR x\r\n").count(), 0);
    assert_eq!(blocks(b"VALUE a 0 5\r\nhi").count(), 0, "cut short: nothing past the bytes");
    let stats: Vec<&[u8]> = lines(b"STAT a 1\r\nSTAT b 2\r\n").collect();
    assert_eq!(stats, [&b"STAT a 1"[..], b"STAT b 2"]);
    assert_eq!(stat(b"STAT version 1.6.18 x"), Some(("version", "1.6.18 x")));
    assert_eq!(stat(b"END"), None);
    assert!(is_error_line(b"ERROR") && is_error_line(b"CLIENT_ERROR bad") && !is_error_line(b"END"));
}

#[test]
fn lease_headers() {
    let h = LeaseHeader::parse(b"LVALUE k 12345 7 3").unwrap();
    assert_eq!(h, LeaseHeader { key: b"k", token: 12345, flags: 7, len: 3 });
    assert_eq!(LeaseHeader::parse(b"LVALUE k 1 0 0").map(|h| h.token), Some(1));
    for bad in [&b"VALUE k 1 0"[..], b"LVALUE k 1 0", b"LVALUE k x 0 0", b"LVALUE k 1 0 0 9"] {
        assert_eq!(LeaseHeader::parse(bad), None, "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn value_headers() {
    let h = ValueHeader::parse(b"VALUE k 5 10 77").unwrap();
    assert_eq!(h, ValueHeader { key: b"k", flags: 5, len: 10, cas: 77 });
    assert_eq!(ValueHeader::parse(b"VALUE k 5 10").unwrap().cas, 0);
    for bad in [&b"END"[..], b"VALUE k", b"VALUE k x 1", b"VALUE k 1 2 3 4", b"VALUE k 1 -2"] {
        assert!(ValueHeader::parse(bad).is_none(), "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn blocks_at_gives_each_block_with_its_bytes() {
    let answer = b"VALUE a 0 1\r\nx\r\nVALUE bb 5 3 9\r\nyyy\r\n";
    let found: Vec<_> = blocks_at(answer).collect();
    assert_eq!(found.len(), 2);
    assert_eq!(&answer[found[0].0.clone()], b"VALUE a 0 1\r\nx\r\n");
    assert_eq!(&answer[found[1].0.clone()], b"VALUE bb 5 3 9\r\nyyy\r\n");
    assert_eq!(found[1].1, Block { line: b"VALUE bb 5 3 9", key: b"bb", data: b"yyy" });
    // A block cut short is not given.
    assert_eq!(blocks_at(&answer[..answer.len() - 1]).count(), 1);
}

/// [`value_block`] finds the length where splitting the line into words finds it (as it did,
/// word by word), on every line built from these words: keys and numbers of each length around
/// the eight bytes searched at once, empty words (two spaces), too few and too many words, and
/// words that are no number.
#[test]
fn value_lines_give_the_length_their_words_give() {
    fn by_words(line: &[u8]) -> Option<(&[u8], usize)> {
        let index = if line.starts_with(b"VALUE ") {
            3
        } else if line.starts_with(b"LVALUE ") {
            4
        } else {
            return None;
        };
        let word = line.strip_suffix(b"\r\n")?.split(|&b| b == b' ').nth(index)?;
        Some((line.split(|&b| b == b' ').nth(1)?, number::<usize>(word)?))
    }
    let words: [&[u8]; 9] =
        [b"", b"7", b"42", b"123456789", b"x", b"k\xff", b"key:0000001", b"1a", b"18446744073709551616"];
    let mut checked = 0;
    for head in [&b"VALUE"[..], b"LVALUE", b"VALUEX", b"END"] {
        let mut lines: Vec<Vec<u8>> = vec![head.to_vec()];
        for _ in 0..5 {
            let longer =
                lines.iter().flat_map(|line| words.iter().map(move |w| [line, &b" "[..], w].concat()));
            lines = longer.collect();
            for line in &lines {
                for end in [&b"\r\n"[..], b"\n", b" \r\n"] {
                    let line = [line, end].concat();
                    assert_eq!(value_block(&line), by_words(&line), "{:?}", String::from_utf8_lossy(&line));
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 100_000, "{checked} lines");
}

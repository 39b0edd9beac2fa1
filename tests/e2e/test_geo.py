"""Geo commands (GEOADD, GEODIST, GEOHASH, GEOPOS, GEOSEARCH[STORE], GEORADIUS[BYMEMBER][_RO]).

Every expected reply was captured from redis-server 7.0.15 and runs against both servers
(E2E_TARGET=redis). Distances are `%.4f`-like bulk strings, coordinates `%.17Lf` trimmed.
"""
import random

import pytest

from helpers import Err

pytestmark = pytest.mark.resp
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
PALERMO = (b"13.36138933897018433", b"38.11555639549629859")
CATANIA = (b"15.08726745843887329", b"37.50266842333162032")


def sicily(c):
    assert c.cmd("GEOADD", "Sicily", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania") == 2


def test_the_documented_example(c):
    sicily(c)
    assert c.cmd("ZRANGE", "Sicily", "0", "-1", "WITHSCORES") == [
        b"Palermo", b"3479099956230698", b"Catania", b"3479447370796909"]
    assert c.cmd("GEOPOS", "Sicily", "Palermo", "Catania", "NonExisting") == [list(PALERMO), list(CATANIA), None]
    assert c.cmd("GEOHASH", "Sicily", "Palermo", "Catania", "NonExisting") == [b"sqc8b49rny0", b"sqdtr74hyu0", None]
    assert c.cmd("GEODIST", "Sicily", "Palermo", "Catania") == b"166274.1516"
    distances = {"m": b"166274.1516", "KM": b"166.2742", "mi": b"103.3182", "ft": b"545518.8700"}
    for unit, distance in distances.items():
        assert c.cmd("GEODIST", "Sicily", "Palermo", "Catania", unit) == distance
    assert c.cmd("GEODIST", "Sicily", "Palermo", "Palermo") == b"0.0000"
    assert c.cmd("GEORADIUS", "Sicily", "15", "37", "200", "km", "WITHDIST", "WITHCOORD", "WITHHASH") == [
        [b"Palermo", b"190.4424", 3479099956230698, list(PALERMO)],
        [b"Catania", b"56.4413", 3479447370796909, list(CATANIA)]]
    assert c.cmd("GEORADIUS", "Sicily", "15", "37", "100", "km") == [b"Catania"]
    assert c.cmd("GEORADIUSBYMEMBER", "Sicily", "Palermo", "200", "km", "WITHDIST", "DESC") == [
        [b"Catania", b"166.2742"], [b"Palermo", b"0.0000"]]
    assert c.cmd("GEOADD", "Sicily", "12.758489", "38.788135", "edge1", "17.241510", "38.788135", "edge2") == 2
    assert c.cmd("GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "400", "400", "km", "ASC",
                 "WITHCOORD", "WITHDIST") == [
        [b"Catania", b"56.4413", list(CATANIA)], [b"Palermo", b"190.4424", list(PALERMO)],
        [b"edge2", b"279.7403", [b"17.24151045083999634", b"38.78813451624225195"]],
        [b"edge1", b"279.7405", [b"12.7584877610206604", b"38.78813451624225195"]]]
    assert c.cmd("GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "ASC") == [
        b"Catania", b"Palermo"]
    assert c.cmd("GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo", "BYRADIUS", "250", "mi", "DESC", "COUNT", "2",
                 "WITHDIST") == [[b"edge2", b"215.0741"], [b"Catania", b"103.3182"]]


def test_geoadd_flags(c):
    sicily(c)
    assert c.cmd("GEOADD", "Sicily", "13.361389", "38.115556", "Palermo") == 0
    assert c.cmd("GEOADD", "Sicily", "CH", "13.361389", "38.115556", "Palermo", "15", "37", "Catania") == 1
    # XX: Catania moves back (not counted without CH), "new" is not added
    assert c.cmd("GEOADD", "Sicily", "XX", "1", "1", "new", "15.087269", "37.502669", "Catania") == 0
    assert c.cmd("ZSCORE", "Sicily", "Catania") == b"3479447370796909"
    assert c.cmd("GEOADD", "Sicily", "XX", "CH", "15", "37", "Catania") == 1
    assert c.cmd("GEOADD", "Sicily", "NX", "CH", "0", "0", "Catania", "1", "1", "new") == 1
    assert c.cmd("GEOPOS", "Sicily", "new") == [[b"0.99999994039535522", b"0.99999945914297683"]]
    # the same member twice: added, then updated (counted by CH)
    assert c.cmd("GEOADD", "twice", "CH", "1", "1", "m", "2", "2", "m") == 2
    assert c.cmd("GEOADD", "XX", "XX", "1", "1", "m") == 0
    assert c.cmd("EXISTS", "XX") == 0
    # the limits are included
    assert c.cmd("GEOADD", "edges", "180", "85.05112878", "ne", "-180", "-85.05112878", "sw", "0", "0", "o") == 3
    assert c.cmd("ZRANGE", "edges", "0", "-1", "WITHSCORES") == [
        b"sw", b"0", b"o", b"3377699720527872", b"ne", b"13510798882111488"]
    assert c.cmd("GEOPOS", "edges", "ne", "sw") == [
        [b"180", b"85.0511287799999991"], [b"-179.99999731779098511", b"-85.05112751263942528"]]
    assert c.cmd("GEOHASH", "edges", "ne", "sw", "o") == [b"bp05b5048p0", b"00bh0hbj200", b"s0000000000"]


def test_geoadd_errors(c):
    sicily(c)
    syntax = Err("ERR syntax error")
    assert c.cmd("GEOADD", "Sicily", "NX", "XX", "13.361389", "38.115556", "Palermo") == syntax
    assert c.cmd("GEOADD", "Sicily", "NX", "1", "2") == syntax
    assert c.cmd("GEOADD", "Sicily", "CH", "NX", "NX") == syntax
    assert c.cmd("GEOADD", "Sicily", "GT", "10", "10", "x") == syntax
    assert c.cmd("GEOADD", "Sicily", "1", "2") == Err("ERR wrong number of arguments for 'geoadd' command")
    assert c.cmd("GEOADD", "Sicily", "200", "10", "x") == Err(
        "ERR invalid longitude,latitude pair 200.000000,10.000000")
    assert c.cmd("GEOADD", "Sicily", "10", "-85.06", "x", "1", "1", "y") == Err(
        "ERR invalid longitude,latitude pair 10.000000,-85.060000")
    assert c.cmd("GEOADD", "Sicily", "inf", "0", "x") == Err("ERR invalid longitude,latitude pair inf,0.000000")
    assert c.cmd("GEOADD", "Sicily", "abc", "10", "x") == Err("ERR value is not a valid float")
    assert c.cmd("GEOADD", "Sicily", "1", "nan", "x") == Err("ERR value is not a valid float")
    assert c.cmd("ZCARD", "Sicily") == 2
    c.cmd("SET", "str", "x")
    assert c.cmd("GEOADD", "str", "1", "1", "a") == Err(WRONGTYPE)
    assert c.cmd("GEOADD", "str", "1", "100", "a") == Err("ERR invalid longitude,latitude pair 1.000000,100.000000")


def test_reads_of_missing_keys_members_and_other_types(c):
    sicily(c)
    assert c.cmd("GEOPOS", "nokey", "a", "b") == [None, None]
    assert c.cmd("GEOHASH", "nokey", "a") == [None]
    assert c.cmd("GEODIST", "nokey", "a", "b") is None
    assert c.cmd("GEODIST", "Sicily", "Palermo", "nope") is None
    assert c.cmd("GEODIST", "Sicily", "Palermo", "Catania", "yd") == Err(
        "ERR unsupported unit provided. please use M, KM, FT, MI")
    assert c.cmd("GEODIST", "Sicily", "Palermo", "Catania", "km", "x") == Err("ERR syntax error")
    assert c.cmd("GEORADIUS", "nokey", "15", "37", "200", "km") == []
    # a missing source is known before GEORADIUSBYMEMBER looks at its member and radius
    assert c.cmd("GEORADIUSBYMEMBER", "nokey", "m", "x", "y") == []
    assert c.cmd("GEOSEARCH", "nokey", "FROMMEMBER", "m", "BYRADIUS", "1", "m") == []
    c.cmd("SET", "str", "x")
    for command in [("GEOPOS", "str", "a"), ("GEOHASH", "str", "a"), ("GEODIST", "str", "a", "b"),
                    ("GEORADIUS", "str", "15", "37", "x", "km"), ("GEOSEARCH", "str", "nonsense", "1", "2", "3", "4")]:
        assert c.cmd(*command) == Err(WRONGTYPE), command
    assert c.cmd("GEODIST", "str", "a", "b", "yd") == Err("ERR unsupported unit provided. please use M, KM, FT, MI")


def test_search_errors(c):
    sicily(c)
    near = ("GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37")
    assert c.cmd(*near, "ASC", "WITHDIST") == Err(
        "ERR exactly one of BYRADIUS and BYBOX can be specified for GEOSEARCH")
    assert c.cmd("geosearch", "Sicily", "BYRADIUS", "1", "km", "ASC", "WITHDIST") == Err(
        "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for geosearch")
    assert c.cmd(*near, "BYBOX", "1", "1", "km", "BYRADIUS", "1", "m") == Err("ERR syntax error")
    assert c.cmd("GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo", "FROMLONLAT", "1", "1") == Err("ERR syntax error")
    assert c.cmd("GEOSEARCH", "Sicily", "FROMMEMBER", "nope", "BYRADIUS", "1", "m") == Err(
        "ERR could not decode requested zset member")
    assert c.cmd(*near, "BYBOX", "-1", "1", "km") == Err("ERR height or width cannot be negative")
    assert c.cmd(*near, "BYBOX", "x", "1", "km") == Err("ERR need numeric width")
    assert c.cmd(*near, "BYBOX", "1", "y", "km") == Err("ERR need numeric height")
    assert c.cmd(*near, "BYRADIUS", "-1", "km") == Err("ERR radius cannot be negative")
    assert c.cmd(*near, "BYRADIUS", "x", "km") == Err("ERR need numeric radius")
    assert c.cmd(*near, "BYRADIUS", "1", "yd") == Err("ERR unsupported unit provided. please use M, KM, FT, MI")
    assert c.cmd(*near, "BYRADIUS", "1", "km", "COUNT", "0") == Err("ERR COUNT must be > 0")
    assert c.cmd(*near, "BYRADIUS", "1", "km", "COUNT", "x") == Err("ERR value is not an integer or out of range")
    assert c.cmd(*near, "BYRADIUS", "1", "km", "ANY") == Err("ERR the ANY argument requires COUNT argument")
    assert c.cmd(*near, "BYRADIUS", "1", "km", "STORE", "d") == Err("ERR syntax error")
    assert c.cmd(*near, "BYRADIUS", "1", "km", "STOREDIST") == Err("ERR syntax error")
    assert c.cmd("GEOSEARCH", "Sicily", "FROMLONLAT", "15", "91", "BYRADIUS", "1", "km") == Err(
        "ERR invalid longitude,latitude pair 15.000000,91.000000")
    assert c.cmd("GEOSEARCHSTORE", "d", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "1", "km",
                 "WITHDIST") == Err("ERR GEOSEARCHSTORE is not compatible with WITHDIST, WITHHASH and WITHCOORD options")
    assert c.cmd("GEORADIUS", "Sicily", "15", "37", "1", "km", "STORE", "d", "WITHHASH") == Err(
        "ERR STORE option in GEORADIUS is not compatible with WITHDIST, WITHHASH and WITHCOORD options")
    assert c.cmd("GEORADIUS_RO", "Sicily", "15", "37", "1", "km", "STORE", "d") == Err("ERR syntax error")
    assert c.cmd("GEORADIUSBYMEMBER_RO", "Sicily", "Palermo", "1", "km", "STOREDIST", "d") == Err("ERR syntax error")
    assert c.cmd("GEORADIUSBYMEMBER", "Sicily", "nope", "1", "km") == Err("ERR could not decode requested zset member")
    assert c.cmd("GEORADIUS", "Sicily", "15", "37", "1", "km", "FROMLONLAT", "1", "1") == Err("ERR syntax error")
    assert c.cmd("GEORADIUS", "Sicily", "15", "37", "1") == Err(
        "ERR wrong number of arguments for 'georadius' command")


def test_stores(c):
    sicily(c)
    c.cmd("GEOADD", "Sicily", "12.758489", "38.788135", "edge1", "17.241510", "38.788135", "edge2")
    box = ("FROMLONLAT", "15", "37", "BYBOX", "400", "400", "km", "ASC", "COUNT", "3")
    assert c.cmd("GEOSEARCHSTORE", "near", "Sicily", *box) == 3
    assert c.cmd("ZRANGE", "near", "0", "-1", "WITHSCORES") == [
        b"Palermo", b"3479099956230698", b"Catania", b"3479447370796909", b"edge2", b"3481342659049484"]
    assert c.cmd("GEOSEARCHSTORE", "near", "Sicily", *box, "STOREDIST") == 3
    assert c.cmd("ZRANGE", "near", "0", "-1", "WITHSCORES") == [
        b"Catania", b"56.441257870158204", b"Palermo", b"190.44242984775784", b"edge2", b"279.7403417843143"]
    # STORE and STOREDIST: the last one given wins
    assert c.cmd("GEORADIUS", "Sicily", "15", "37", "200", "km", "STOREDIST", "d", "STORE", "s") == 2
    assert c.cmd("ZRANGE", "s", "0", "-1", "WITHSCORES") == [
        b"Palermo", b"3479099956230698", b"Catania", b"3479447370796909"]
    assert c.cmd("EXISTS", "d") == 0
    c.cmd("ZREM", "Sicily", "edge1", "edge2")
    assert c.cmd("GEORADIUSBYMEMBER", "Sicily", "Palermo", "170", "km", "STOREDIST", "d") == 2
    assert c.cmd("ZRANGE", "d", "0", "-1", "WITHSCORES") == [b"Palermo", b"0", b"Catania", b"166.27415156960032"]
    # nothing found, or no source: the destination is deleted, whatever it held
    c.cmd("SET", "str", "x")
    assert c.cmd("GEORADIUS", "Sicily", "15", "37", "1", "km", "STORE", "str") == 0
    assert c.cmd("EXISTS", "str") == 0
    assert c.cmd("GEOSEARCHSTORE", "near", "nokey", "FROMMEMBER", "x", "BYRADIUS", "200", "km") == 0
    assert c.cmd("EXISTS", "near") == 0
    c.cmd("SET", "str", "x")
    assert c.cmd("GEOSEARCHSTORE", "str", "Sicily", "FROMMEMBER", "Palermo", "BYRADIUS", "1", "m") == 1
    assert c.cmd("TYPE", "str") == "zset"


def test_resp3_replies(c):
    sicily(c)
    c.cmd("HELLO", "3")
    assert c.cmd("GEOPOS", "Sicily", "Palermo", "nope") == [
        [("double", PALERMO[0].decode()), ("double", PALERMO[1].decode())], None]
    assert c.cmd("GEODIST", "Sicily", "Palermo", "Catania", "km") == b"166.2742"
    assert c.cmd("GEODIST", "Sicily", "Palermo", "nope") is None
    assert c.cmd("GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo", "BYRADIUS", "200", "km", "ASC", "WITHDIST",
                 "WITHHASH", "WITHCOORD") == [
        [b"Palermo", b"0.0000", 3479099956230698, [("double", "13.36138933897018433"), ("double", "38.11555639549629859")]],
        [b"Catania", b"166.2742", 3479447370796909, [("double", "15.08726745843887329"), ("double", "37.50266842333162032")]]]


def test_scores_geoadd_did_not_write(c):
    # any score reads as some position: x86-64's conversion of the double to 64 bits, then the cell's center
    c.cmd("ZADD", "w", "-1", "neg", "1e20", "big", "0", "zero", "4503599627370496", "top")
    # -1: all 64 bits set, both cells past the top, clamped to the limits; 1e20: past 2^64, 0; 2^52: the
    # latitude's cell one past the top
    first_cell = [b"-179.99999731779098511", b"-85.05112751263942528"]
    assert c.cmd("GEOPOS", "w", "neg", "big", "zero", "top") == [
        [b"180", b"85.0511287799999991"], first_cell, first_cell, [b"-179.99999731779098511", b"85.0511287799999991"]]
    assert c.cmd("GEOHASH", "w", "neg", "big", "zero", "top") == [
        b"bp05b5048p0", b"00bh0hbj200", b"00bh0hbj200", b"bp05b5048p0"]


def world_points():
    """80 points in three clusters (Sicily, across the antimeridian, near the northern limit) and 12 members
    sharing earlier members' positions, whose equal distances show the sorts' orders of ties."""
    rng = random.Random(20261126)
    points = []
    for center_x, center_y, spread, count in [(13.0, 38.0, 1.0, 40), (179.9, -10.0, 0.5, 20), (20.0, 84.0, 1.0, 20)]:
        for _ in range(count):
            x = max(-180.0, min(180.0, center_x + rng.uniform(-spread, spread)))
            y = center_y + rng.uniform(-spread, spread)
            points.append(("%.6f" % x, "%.6f" % y))
    for _ in range(12):
        points.append(points[rng.randrange(len(points))])
    return [(x, y, "p%02d" % i) for i, (x, y) in enumerate(points)]


RANDOM_CASES = [
    (('GEOSEARCH', 'world', 'FROMLONLAT', '13', '38', 'BYRADIUS', '60', 'km', 'WITHDIST'),
     [[b'p08', b'22.6062'], [b'p12', b'18.7459'], [b'p11', b'34.5230'], [b'p29', b'22.7672'], [b'p28', b'32.1138'],
      [b'p33', b'48.8061'], [b'p05', b'51.1437'], [b'p04', b'58.6847'], [b'p07', b'34.7164'], [b'p03', b'51.2684'],
      [b'p18', b'41.7628'], [b'p39', b'17.9554'], [b'p20', b'51.8694'], [b'p81', b'51.8694'], [b'p26', b'43.6888'],
      [b'p35', b'56.8496'], [b'p02', b'47.8964'], [b'p13', b'45.9944']]),
    (('GEOSEARCH', 'world', 'FROMLONLAT', '13', '38', 'BYRADIUS', '60', 'km', 'ASC', 'WITHDIST'),
     [[b'p39', b'17.9554'], [b'p12', b'18.7459'], [b'p08', b'22.6062'], [b'p29', b'22.7672'], [b'p28', b'32.1138'],
      [b'p11', b'34.5230'], [b'p07', b'34.7164'], [b'p18', b'41.7628'], [b'p26', b'43.6888'], [b'p13', b'45.9944'],
      [b'p02', b'47.8964'], [b'p33', b'48.8061'], [b'p05', b'51.1437'], [b'p03', b'51.2684'], [b'p20', b'51.8694'],
      [b'p81', b'51.8694'], [b'p35', b'56.8496'], [b'p04', b'58.6847']]),
    (('GEOSEARCH', 'world', 'FROMMEMBER', 'p03', 'BYBOX', '150', '80', 'km', 'DESC', 'WITHDIST'),
     [[b'p13', b'70.8593'], [b'p31', b'65.3270'], [b'p16', b'54.8096'], [b'p36', b'53.2904'], [b'p80', b'53.2904'],
      [b'p84', b'53.2904'], [b'p27', b'51.9977'], [b'p82', b'51.9977'], [b'p07', b'45.0950'], [b'p04', b'40.9623'],
      [b'p20', b'40.1159'], [b'p81', b'40.1159'], [b'p39', b'33.3752'], [b'p32', b'28.8077'], [b'p18', b'9.9152'],
      [b'p03', b'0.0000']]),
    (('GEOSEARCH', 'world', 'FROMMEMBER', 'p05', 'BYRADIUS', '90', 'km', 'COUNT', '6', 'WITHDIST'),
     [[b'p05', b'0.0000'], [b'p81', b'23.4845'], [b'p20', b'23.4845'], [b'p28', b'23.5685'], [b'p21', b'39.2941'],
      [b'p84', b'40.0241']]),
    (('GEOSEARCH', 'world', 'FROMMEMBER', 'p05', 'BYRADIUS', '90', 'km', 'COUNT', '4', 'ANY', 'WITHDIST'),
     [[b'p26', b'89.9876'], [b'p02', b'89.9027'], [b'p07', b'78.6454'], [b'p03', b'60.2818']]),
    (('GEOSEARCH', 'world', 'FROMMEMBER', 'p05', 'BYRADIUS', '90', 'km', 'COUNT', '4', 'ANY', 'DESC', 'WITHDIST'),
     [[b'p26', b'89.9876'], [b'p02', b'89.9027'], [b'p07', b'78.6454'], [b'p03', b'60.2818']]),
    (('GEOSEARCH', 'world', 'FROMLONLAT', '-179.95', '-10', 'BYRADIUS', '80', 'km', 'ASC', 'WITHDIST', 'WITHHASH'),
     [[b'p58', b'14.2349', 3371904213407573], [b'p54', b'15.1982', 3371858386243679],
      [b'p86', b'15.1982', 3371858386243679], [b'p91', b'15.1982', 3371858386243679],
      [b'p44', b'42.6920', 3371840872867491], [b'p45', b'48.4643', 3371838912538481],
      [b'p56', b'49.6590', 3371850320927777], [b'p85', b'49.6590', 3371850320927777],
      [b'p46', b'50.3631', 3371839558505118], [b'p41', b'52.6125', 3371919464234695],
      [b'p53', b'53.3605', 3371896738707350], [b'p40', b'60.3834', 3371837461313933],
      [b'p88', b'60.3834', 3371837461313933], [b'p49', b'68.5933', 3371894689263511],
      [b'p57', b'69.9323', 3371843469801122], [b'p52', b'73.0715', 3371899069276054],
      [b'p47', b'73.4806', 3371912309515548]]),
    (('GEOSEARCH', 'world', 'FROMLONLAT', '179.99', '-10.2', 'BYBOX', '100', '60', 'km', 'ASC', 'WITHCOORD'),
     [[b'p44', [b'179.91947740316390991', b'-10.36169296406459495']],
      [b'p54', [b'179.91487473249435425', b'-9.96899875373285482']],
      [b'p86', [b'179.91487473249435425', b'-9.96899875373285482']],
      [b'p91', [b'179.91487473249435425', b'-9.96899875373285482']],
      [b'p45', [b'179.79583293199539185', b'-10.35675532724620496']],
      [b'p46', [b'179.85114544630050659', b'-10.40831915979063638']],
      [b'p58', [b'179.92730408906936646', b'-9.95784598063175963']],
      [b'p56', [b'179.66236621141433716', b'-10.23175301855224717']],
      [b'p85', [b'179.66236621141433716', b'-10.23175301855224717']],
      [b'p40', [b'179.67510133981704712', b'-10.39822843485530512']],
      [b'p88', [b'179.67510133981704712', b'-10.39822843485530512']]]),
    (('GEOSEARCH', 'world', 'FROMLONLAT', '20', '84', 'BYRADIUS', '50', 'km', 'ASC', 'COUNT', '5', 'WITHDIST'),
     [[b'p65', b'8.3044'], [b'p76', b'8.4600'], [b'p77', b'11.3907'], [b'p74', b'16.6719'], [b'p71', b'18.0779']]),
    (('GEOSEARCH', 'world', 'FROMLONLAT', '20', '85', 'BYBOX', '200', '100', 'mi', 'DESC', 'COUNT', '3', 'WITHDIST'),
     [[b'p69', b'42.6618'], [b'p60', b'31.4683'], [b'p79', b'16.4890']]),
    (('GEORADIUS', 'world', '0', '0', '7000', 'km', 'COUNT', '3', 'WITHDIST'),
     [[b'p22', b'4325.3542'], [b'p37', b'4330.3158'], [b'p00', b'4332.4563']]),
    (('GEORADIUS', 'world', '0', '0', '20000', 'km', 'ASC', 'COUNT', '4', 'WITHDIST'),
     [[b'p22', b'4325.3542'], [b'p37', b'4330.3158'], [b'p00', b'4332.4563'], [b'p15', b'4335.9763']]),
]


@pytest.mark.parametrize("query,expected", RANDOM_CASES, ids=[" ".join(q[2:]) for q, _ in RANDOM_CASES])
def test_searches_match_redis(c, query, expected):
    """Unsorted results come in scan order (cell by cell, by score); ASC/DESC sort all results stably, COUNT
    without ANY sorts only the positions kept (Redis's partial quicksort: its order of ties), ANY stops the
    scan at COUNT; the cells wrap around the antimeridian and widen near the limits."""
    args = ["GEOADD", "world"]
    for x, y, member in world_points():
        args += [x, y, member]
    assert c.cmd(*args) == 92
    assert c.cmd(*query) == expected

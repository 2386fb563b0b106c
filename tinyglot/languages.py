"""Language codes: one canonical code per language.

Data in tinyglot reduces locales to their base language: ``pt_BR``, ``pt-BR`` and ``por`` are
all ``pt``; ``zh-CN``, ``zh_Hans``, ``zh-TW`` and ``chi`` are all ``zh``; ``sr@latin`` is ``sr``.
The canonical code is the ISO 639-1 two-letter code where the language has one, else its ISO
639-3 code (``ast``, ``ckb``, ``fil``, ``yue`` ...).

>>> normalize_lang("pt_BR"), normalize_lang("deu"), normalize_lang("en_US.UTF-8")
('pt', 'de', 'en')
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from tinyglot.errors import TinyglotError, UnknownLanguageError
from tinyglot.peerinfo import PEERS

# ISO 639-1 languages: ``639-1  639-3 (=639-2/T)  639-2/B or -  English name (_ for space)``.
_ISO_639_1 = """
aa aar - Afar
ab abk - Abkhazian
ae ave - Avestan
af afr - Afrikaans
ak aka - Akan
am amh - Amharic
an arg - Aragonese
ar ara - Arabic
as asm - Assamese
av ava - Avaric
ay aym - Aymara
az aze - Azerbaijani
ba bak - Bashkir
be bel - Belarusian
bg bul - Bulgarian
bh bih - Bihari
bi bis - Bislama
bm bam - Bambara
bn ben - Bengali
bo bod tib Tibetan
br bre - Breton
bs bos - Bosnian
ca cat - Catalan
ce che - Chechen
ch cha - Chamorro
co cos - Corsican
cr cre - Cree
cs ces cze Czech
cu chu - Church_Slavic
cv chv - Chuvash
cy cym wel Welsh
da dan - Danish
de deu ger German
dv div - Divehi
dz dzo - Dzongkha
ee ewe - Ewe
el ell gre Greek
en eng - English
eo epo - Esperanto
es spa - Spanish
et est - Estonian
eu eus baq Basque
fa fas per Persian
ff ful - Fulah
fi fin - Finnish
fj fij - Fijian
fo fao - Faroese
fr fra fre French
fy fry - Western_Frisian
ga gle - Irish
gd gla - Scottish_Gaelic
gl glg - Galician
gn grn - Guarani
gu guj - Gujarati
gv glv - Manx
ha hau - Hausa
he heb - Hebrew
hi hin - Hindi
ho hmo - Hiri_Motu
hr hrv - Croatian
ht hat - Haitian_Creole
hu hun - Hungarian
hy hye arm Armenian
hz her - Herero
ia ina - Interlingua
id ind - Indonesian
ie ile - Interlingue
ig ibo - Igbo
ii iii - Sichuan_Yi
ik ipk - Inupiaq
io ido - Ido
is isl ice Icelandic
it ita - Italian
iu iku - Inuktitut
ja jpn - Japanese
jv jav - Javanese
ka kat geo Georgian
kg kon - Kongo
ki kik - Kikuyu
kj kua - Kuanyama
kk kaz - Kazakh
kl kal - Kalaallisut
km khm - Khmer
kn kan - Kannada
ko kor - Korean
kr kau - Kanuri
ks kas - Kashmiri
ku kur - Kurdish
kv kom - Komi
kw cor - Cornish
ky kir - Kyrgyz
la lat - Latin
lb ltz - Luxembourgish
lg lug - Ganda
li lim - Limburgish
ln lin - Lingala
lo lao - Lao
lt lit - Lithuanian
lu lub - Luba-Katanga
lv lav - Latvian
mg mlg - Malagasy
mh mah - Marshallese
mi mri mao Maori
mk mkd mac Macedonian
ml mal - Malayalam
mn mon - Mongolian
mr mar - Marathi
ms msa may Malay
mt mlt - Maltese
my mya bur Burmese
na nau - Nauru
nb nob - Norwegian_Bokmål
nd nde - North_Ndebele
ne nep - Nepali
ng ndo - Ndonga
nl nld dut Dutch
nn nno - Norwegian_Nynorsk
no nor - Norwegian
nr nbl - South_Ndebele
nv nav - Navajo
ny nya - Chichewa
oc oci - Occitan
oj oji - Ojibwa
om orm - Oromo
or ori - Odia
os oss - Ossetian
pa pan - Punjabi
pi pli - Pali
pl pol - Polish
ps pus - Pashto
pt por - Portuguese
qu que - Quechua
rm roh - Romansh
rn run - Rundi
ro ron rum Romanian
ru rus - Russian
rw kin - Kinyarwanda
sa san - Sanskrit
sc srd - Sardinian
sd snd - Sindhi
se sme - Northern_Sami
sg sag - Sango
si sin - Sinhala
sk slk slo Slovak
sl slv - Slovenian
sm smo - Samoan
sn sna - Shona
so som - Somali
sq sqi alb Albanian
sr srp - Serbian
ss ssw - Swati
st sot - Southern_Sotho
su sun - Sundanese
sv swe - Swedish
sw swa - Swahili
ta tam - Tamil
te tel - Telugu
tg tgk - Tajik
th tha - Thai
ti tir - Tigrinya
tk tuk - Turkmen
tl tgl - Tagalog
tn tsn - Tswana
to ton - Tongan
tr tur - Turkish
ts tso - Tsonga
tt tat - Tatar
tw twi - Twi
ty tah - Tahitian
ug uig - Uyghur
uk ukr - Ukrainian
ur urd - Urdu
uz uzb - Uzbek
ve ven - Venda
vi vie - Vietnamese
vo vol - Volapük
wa wln - Walloon
wo wol - Wolof
xh xho - Xhosa
yi yid - Yiddish
yo yor - Yoruba
za zha - Zhuang
zh zho chi Chinese
zu zul - Zulu
"""

# Languages without an ISO 639-1 code, by ISO 639-3 (or 639-2 collective) code.  Covers every
# such code in the shipped training data and in LASER's Tatoeba test sets.
_ISO_639_3_ONLY = """
ace Acehnese
ang Old_English
arq Algerian_Arabic
arz Egyptian_Arabic
ast Asturian
awa Awadhi
ban Balinese
bar Bavarian
ber Berber
bho Bhojpuri
brx Bodo
bug Buginese
cak Kaqchikel
cbk Chavacano
ceb Cebuano
ckb Central_Kurdish
crh Crimean_Tatar
csb Kashubian
doi Dogri
dsb Lower_Sorbian
dtp Central_Dusun
fil Filipino
frp Arpitan
fur Friulian
gom Goan_Konkani
got Gothic
grc Ancient_Greek
gsw Swiss_German
gug Paraguayan_Guaraní
hak Hakka_Chinese
haw Hawaiian
hil Hiligaynon
hne Chhattisgarhi
hsb Upper_Sorbian
ilo Iloko
jbo Lojban
kaa Karakalpak
kab Kabyle
kbd Kabardian
kmr Northern_Kurdish
kok Konkani
krc Karachay-Balkar
ksh Kölsch
kzj Coastal_Kadazan
lad Ladino
lfn Lingua_Franca_Nova
lij Ligurian
lmo Lombard
ltg Latgalian
lzh Literary_Chinese
mad Madurese
mag Magahi
mai Maithili
max North_Moluccan_Malay
mdf Moksha
mhr Eastern_Mari
min Minangkabau
mni Manipuri
mrh Mara_Chin
myv Erzya
nan Min_Nan_Chinese
nap Neapolitan
nds Low_German
nov Novial
nso Northern_Sotho
orv Old_Russian
pam Pampanga
pap Papiamento
peo Old_Persian
pms Piedmontese
rue Rusyn
sah Yakut
sat Santali
scn Sicilian
sco Scots
shn Shan
skr Saraiki
swg Swabian
szl Silesian
tet Tetum
tlh Klingon
tok Toki_Pona
tpi Tok_Pisin
tyv Tuvinian
tzl Talossan
tzm Central_Atlas_Tamazight
udm Udmurt
vec Venetian
war Waray
wuu Wu_Chinese
xal Kalmyk
yue Cantonese
zgh Standard_Moroccan_Tamazight
"""

# Deprecated codes, and 639-3 individual languages that data sets use for a macrolanguage
# (Tatoeba writes ``cmn`` for Chinese, ``pes`` for Persian ...).
_ALIASES = {
    "iw": "he", "in": "id", "ji": "yi", "jw": "jv", "mo": "ro", "mol": "ro",
    "scc": "sr", "scr": "hr",
    "cmn": "zh", "arb": "ar", "pes": "fa", "zsm": "ms", "swh": "sw", "lvs": "lv", "ekk": "et",
    "khk": "mn", "uzn": "uz", "azj": "az", "npi": "ne", "ory": "or", "pbt": "ps", "ydd": "yi",
    "plt": "mg", "gaz": "om",
}

_FIX = "use an ISO 639-1/639-3 code or a locale, such as de, deu, pt_BR, zh-CN or sr@latin"


def _build_tables() -> tuple[dict[str, str], dict[str, str]]:
    """Return (alias -> canonical code, canonical code -> English name)."""
    lookup: dict[str, str] = {}
    names: dict[str, str] = {}
    for row in _ISO_639_1.split("\n"):
        if row.strip():
            iso1, iso3, iso2b, name = row.split()
            names[iso1] = name.replace("_", " ")
            for alias in (iso1, iso3, iso2b):
                if alias != "-":
                    lookup[alias] = iso1
    for row in _ISO_639_3_ONLY.split("\n"):
        if row.strip():
            iso3, name = row.split()
            names[iso3] = name.replace("_", " ")
            lookup[iso3] = iso3
    lookup.update(_ALIASES)
    return lookup, names


_LOOKUP, _NAMES = _build_tables()
_BY_NAME = {name.casefold(): code for code, name in _NAMES.items()}

KNOWN_LANGUAGES: frozenset[str] = frozenset(_NAMES)
"""Every canonical code :func:`normalize_lang` can return."""

_SEPARATORS = re.compile(r"[-_]")


def _known_codes_hint(limit: int = 24) -> str:
    """A compact list of the known codes for error messages."""
    codes = sorted(KNOWN_LANGUAGES)
    return f"{', '.join(codes[:limit])}, ... ({len(codes)} languages)"


@lru_cache(maxsize=4096)
def normalize_lang(code: str) -> str:
    """Map a language code or locale to its canonical code.

    Accepts ISO 639-1 (``de``), ISO 639-3 / 639-2/T (``deu``), ISO 639-2/B (``ger``), locales
    (``pt_BR``, ``pt-BR``, ``zh_Hans``, ``zh-Hant-TW``, ``sr@latin``, ``en_US.UTF-8``) in any
    case, and English language names (``German``).  Raises :class:`UnknownLanguageError`.
    """
    if not isinstance(code, str) or not code.strip():
        raise UnknownLanguageError(f"empty language code {code!r}", _FIX)
    text = code.strip()
    by_name = _BY_NAME.get(text.casefold())
    if by_name is not None:
        return by_name
    locale = text.split(".", 1)[0].split("@", 1)[0]  # drop encoding and modifier
    base = _SEPARATORS.split(locale, 1)[0].lower()
    canonical = _LOOKUP.get(base)
    if canonical is None:
        raise UnknownLanguageError(
            f"unknown language code {code!r}; known codes: {_known_codes_hint()}", _FIX
        )
    return canonical


def language_name(code: str) -> str:
    """English name of a language given any code :func:`normalize_lang` accepts."""
    return _NAMES[normalize_lang(code)]


def _try_normalize(token: str) -> str | None:
    """Canonical code of ``token``, or None when it is not a language code."""
    if not token or len(_SEPARATORS.split(token, 1)[0]) not in (2, 3):
        return None
    try:
        return normalize_lang(token)
    except UnknownLanguageError:
        return None


def _pair_side(token: str) -> str | None:
    """For a pair token such as ``de-en``, ``deu-eng`` or ``en-pt_BR``: the non-English side."""
    parts = token.split("-")
    if len(parts) != 2:
        parts = token.split("_")
    if len(parts) != 2:
        return None
    a, b = (_try_normalize(p) if _SEPARATORS.split(p, 1)[0].islower() else None for p in parts)
    if a == "en" and b not in (None, "en"):
        return b
    if b == "en" and a not in (None, "en"):
        return a
    return None


_DATA_SUFFIXES = frozenset(
    {"gz", "bz2", "xz", "tsv", "txt", "jsonl", "json", "csv", "po", "pot", "mo", "tmx", "xml"}
)


def lang_from_filename(path: str | Path) -> str | None:
    """Infer the (non-English) language from a file name, or None when it cannot.

    Understands ``de.tsv``, ``pt-BR.tsv``, ``zh_Hans.tsv``, ``tatoeba.deu-eng.deu``,
    ``corpus.de-en.tsv``, ``en-de.tsv``, Moses files (``corpus.de``) and gettext layouts
    (``de/LC_MESSAGES/app.po``).  A name that holds a pair with English gives the other side.
    """
    p = Path(path)
    tokens = p.name.split(".")
    while len(tokens) > 1 and tokens[-1].lower() in _DATA_SUFFIXES:
        tokens.pop()
    for token in tokens:
        side = _pair_side(token)
        if side is not None:
            return side
    for token in reversed(tokens):
        code = _try_normalize(token)
        if code is not None:
            return code
    if p.parent.name == "LC_MESSAGES":
        return _try_normalize(p.parent.parent.name)
    return None


def language_list(value: str | None) -> list[str] | None:
    """A language setting as codes: comma-separated codes, or a peer's name (``e5-small``, ``use-m``)
    for the languages it covers; empty = None (every language)."""
    if not value or not value.strip():
        return None
    name = value.strip()
    if name in PEERS:
        if not PEERS[name].codes:
            raise TinyglotError(f"the peer {name!r} has no list of language codes", "list the codes, e.g. de,fr")
        return list(PEERS[name].codes)
    return [normalize_lang(code.strip()) for code in name.split(",") if code.strip()]

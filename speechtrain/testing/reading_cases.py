"""Sentences with numbers and symbols, each beside the words a native speaker reads it as (written out by hand).

The truth of a reading is espeak-ng's phonemes of the written-out words: the front end reads a case right when its
phonemes of the raw sentence equal them (tests/test_text_spoken.py; the table in docs/data.md). ``written`` is
None where no library and no voice reads the class, and the front end must report it (the class named).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReadingCase:
    language: str
    kind: str  # the class: ordinal, grouped, time, minus, phone_number, percent, currency, counter, url ...
    raw: str
    written: str | None  # None: nothing reads it right; it must be reported


NBSP, NNBSP = "\u00a0", "\u202f"

CASES: tuple[ReadingCase, ...] = (
    # ordinals, with each language's marker
    ReadingCase("en", "ordinal", "He came 1st in the race.", "He came first in the race."),
    ReadingCase("fr-FR", "ordinal", "Le 1er mai est férié.", "Le premier mai est férié."),
    ReadingCase("hu", "ordinal", "Március 15-én ünnepelünk.", "Március tizenötödikén ünnepelünk."),
    ReadingCase("de", "ordinal", "Er wurde der 3. Sieger.", "Er wurde der dritte Sieger."),
    ReadingCase("de", "ordinal", "Wir kommen am 3. Mai.", "Wir kommen am dritten Mai."),
    ReadingCase("tr", "ordinal", "Ali 3. sınıfta okuyor.", "Ali üçüncü sınıfta okuyor."),
    ReadingCase("cs", "ordinal", "Byl to jeho 5. pokus.", None),
    ReadingCase("sv", "ordinal", "Vi ses den 1:a maj.", "Vi ses den första maj."),
    ReadingCase("es", "ordinal", "Llegó el 1.º de mayo.", "Llegó el primero de mayo."),
    ReadingCase("es", "ordinal", "Es la 2.ª vez.", "Es la segunda vez."),
    ReadingCase("ru", "ordinal", "Это 5-й дом.", "Это пятый дом."),
    ReadingCase("ru", "ordinal", "Я живу в 5-м доме.", "Я живу в пятом доме."),
    ReadingCase("ru", "ordinal", "Встретимся 21-го мая.", "Встретимся двадцать первого мая."),
    ReadingCase("az", "ordinal", "O, 5-ci sinifdə oxuyur.", "O, beşinci sinifdə oxuyur."),
    # thousands grouped by a space, a no-break space, a narrow no-break space, the Arabic separator
    ReadingCase("fr-FR", "grouped", "Il y a 10 000 personnes.", "Il y a dix mille personnes."),
    ReadingCase("fr-FR", "grouped", f"Il y a 10{NBSP}000 personnes.", "Il y a dix mille personnes."),
    ReadingCase("fr-FR", "grouped", f"Il y a 10{NNBSP}000 personnes.", "Il y a dix mille personnes."),
    ReadingCase("ru", "grouped", "Он выиграл 1 000 000 рублей.", "Он выиграл один миллион рублей."),
    ReadingCase("pl", "grouped", "Przyszło 10 000 osób.", "Przyszło dziesięć tysięcy osób."),
    ReadingCase("kk", "grouped", "Онда 10 000 адам бар.", "Онда он мың адам бар."),
    ReadingCase("fa", "grouped", "۱۰٬۰۰۰ نفر آمدند.", "ده هزار نفر آمدند."),
    ReadingCase("en", "grouped", "About 10,000 people came.", "About ten thousand people came."),
    ReadingCase("de", "grouped", "Es kamen 10.000 Menschen.", "Es kamen zehntausend Menschen."),
    # clock times
    ReadingCase("tr", "time", "Toplantı saat 14.30 başlıyor.", "Toplantı saat on dört otuz başlıyor."),
    ReadingCase("fi", "time", "Kokous alkaa 14.30 tänään.", "Kokous alkaa neljätoista kolmekymmentä tänään."),
    ReadingCase("nb", "time", "Vi møtes klokka 14:30 i dag.", "Vi møtes klokka fjorten tretti i dag."),
    # minus signs
    ReadingCase("en", "minus", "It was \u22125 degrees.", "It was minus five degrees."),
    ReadingCase("de", "minus", "Es waren -5 Grad.", "Es waren minus fünf Grad."),
    ReadingCase("ru", "minus", "Было \u221210 градусов.", "Было минус десять градусов."),
    # leading zeros: a phone number, digit by digit
    ReadingCase("en", "phone_number", "Call 0123456 now.", "Call zero one two three four five six now."),
    ReadingCase("de", "phone_number", "Ruf 0301234 an.", "Ruf null drei null eins zwei drei vier an."),
    # currency and percent
    ReadingCase("pt-BR", "currency", "Custa R$ 50 hoje.", "Custa cinquenta reais hoje."),
    ReadingCase("id", "currency", "Harganya Rp 5.000 saja.", "Harganya lima ribu rupiah saja."),
    ReadingCase("en", "percent", "It rose by 50% today.", "It rose by fifty percent today."),
    ReadingCase("fa", "percent", "۵۰٪ رای دادند.", "پنجاه درصد رای دادند."),
    ReadingCase("tr", "percent", "Fiyatlar %50 arttı.", "Fiyatlar yüzde elli arttı."),
    # Korean native numerals before counters
    ReadingCase("ko", "counter", "지금 3시예요.", "지금 세 시예요."),
    ReadingCase("ko", "counter", "사과 2개 주세요.", "사과 두 개 주세요."),
    # years said by their hundreds; Telugu's number words in NFC (a vowel sign split in two is read apart)
    ReadingCase("bn", "year", "১৯৭১ সালে দেশ স্বাধীন হয়।", "উনিশশো একাত্তর সালে দেশ স্বাধীন হয়।"),
    ReadingCase("te", "year", "1971 లో జరిగింది.", "పందొమ్మిది వందల డెబ్బై ఒకటి లో జరిగింది."),
    ReadingCase("te", "number", "మాకు 50 పుస్తకాలు ఉన్నాయి.", "మాకు యాభై పుస్తకాలు ఉన్నాయి."),
    # Amharic: ordinals, percent, the era abbreviation
    ReadingCase("am", "ordinal", "3ኛ ክፍል ገባ።", "ሶስተኛ ክፍል ገባ።"),
    ReadingCase("am", "percent", "50% ቅናሽ አለ።", "ሃምሳ በመቶ ቅናሽ አለ።"),
    ReadingCase("am", "abbreviation", "ዘመኑ 2015 ዓ.ም. ነው።", "ዘመኑ ሁለት ሺህ አስራ አምስት ዓመተ ምሕረት ነው።"),
    # punctuation that is a pause: the Greek ano teleia, a dash between words
    ReadingCase("el", "punctuation", "Ήρθε\u0387 έφυγε.", "Ήρθε, έφυγε."),
    ReadingCase("en", "punctuation", "He came \u2013 and left.", "He came \u2014 and left."),
    ReadingCase("de", "punctuation", "Er kam - und ging.", "Er kam \u2014 und ging."),
    # what nothing reads: reported
    ReadingCase("de", "url", "Siehe www.beispiel.de für mehr.", None),
    ReadingCase("es", "email", "Escribe a ana@correo.es hoy.", None),
)

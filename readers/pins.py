# ruff: noqa: E501 - sha256sum lines (digest, two spaces, file name) are kept whole
"""sha256 of the data files inside each official STS / iSTS release archive.

``ctxsim data download`` checks every extracted file named here against its digest, and fails
when one differs or is missing, so a changed or tampered mirror cannot slip other sentences or
gold scores into an evaluation. The digests are those of the byte copies in the shared data
folder (``data/sts/MANIFEST.json``, ``data/ists2016/MANIFEST.json``: the untouched contents of
the organisers' archives), in ``sha256sum`` format, keyed by the archive's file name.

Not pinned, because no copy was at hand to hash: STS16, the SICK test split and the iSTS images
and answers-students domains (held back for independent measurement). Their files are listed as
unpinned in the MANIFEST.json that ``download`` writes, and a warning says so.
"""

from __future__ import annotations

_SUMS: dict[str, str] = {
    "STS2012-en-test.zip": """
5bcbfda125ad56a1b924763482420b585bea9bf74dc2c18d88d62cd6d2e3422f  STS.gs.ALL.txt
5526be59228bc34ccb3cb6f1f56c0d7278d3419b8886713ae016fd92b151f19c  STS.gs.MSRpar.txt
9c6096c6bcfb0144c8bbddb00900ca9198c88498630cd0c8f08d18365f1d7150  STS.gs.MSRvid.txt
708530c4d006d06881f3289fce35d624d7efe562dcf0fe5f8aa0eec3a135f6d4  STS.gs.SMTeuroparl.txt
088d8ca22c0aa406e4a5d2e6e308a4f38b482b8e736c2445a38ffb6e4c4fb4fd  STS.gs.surprise.OnWN.txt
aa6dfc868db333c43dc59be14d46fa6587c7ebddc0d497e717f647bf35121cf1  STS.gs.surprise.SMTnews.txt
76bf7089f9e7c05732163a227b3ce679512554513eb783f2548b07d659bd733d  STS.input.MSRpar.txt
476d14034a241f71b832e4ae557dd6cdbe265b57c915570a2583f93b4456948d  STS.input.MSRvid.txt
dd31dbb6e7eef8a0d00347fe012f7cf372943167e30f60f6fb3b10219a41941f  STS.input.SMTeuroparl.txt
07ec7b91348aece0873b41f7fc4e76e9fddf05bdb82c048c98d92f5db0bec07d  STS.input.surprise.OnWN.txt
2788a98ef33c3b7b704ef4891fe863cfcf061338e8aa41cb737d0f137f3ba03c  STS.input.surprise.SMTnews.txt
""",
    "STS2013-en-test.zip": """
8ca95b7228119578e2007839cf7969f22c4f1fd41fd610c4b7f9683072d98066  STS.gs.FNWN.txt
0cd497aaddb00a2fb6db25f77bccfc09e8aa012e11549b81b434bab1a27ad954  STS.gs.OnWN.txt
a09775ba2fafc9cbe0a7d0a08f0c729789b0d6c99dc4867a86b45b71a73f004e  STS.gs.SMT.txt
f49f64089011436dd296ef384c07160219406feef7dc4b9fa2af52a519f32bc6  STS.gs.headlines.txt
b48fc64cd85703ac6431f8ea6722f325fe9620fd4f33b3d5c24dd89c553e74bc  STS.input.FNWN.txt
127c66889627f26dc11864dc9be4ba1e4895ed60125985c755429ad588e4b9c8  STS.input.OnWN.txt
885e6149fff28a79591ba464c13626d03593b822c88c7c04b6564354d31c7561  STS.input.headlines.txt
""",
    "STS2014-en-test.zip": """
1c80147df270ea4cfce14a47ed29f8a2f10d5dc016d02836077fd786ff7f535b  STS.gs.OnWN.txt
ba6dc76696b5c93985590a325b4d142449932cdf0d715b2bab1b1743fe3c488c  STS.gs.deft-forum.txt
105c5b333abd50c274efb4dae9e3e0dab36ed63eee780cfb49955b1586bd62f2  STS.gs.deft-news.txt
f243c34647255cd0b994565ed4f58dd31506e7d9c9d6250d1a6dd14095625832  STS.gs.headlines.txt
fc994ebacc7074c332626fa9e29542d7340a48a3cdb999b47cdb59c378523a62  STS.gs.images.txt
0098c644bfeaa2d511a8297b1940771865900c372c9dd49a62726dc5ec02c9a3  STS.gs.tweet-news.txt
a227d5fe1c1f729a52a0b39b5b36d3225e1bca3c278e7ed392cac2ecd3990f1c  STS.input.OnWN.txt
8b48aa15bb850e2827446f6e98cc3c5123ff283924b4571a409aa2fab73e35c6  STS.input.deft-forum.txt
92df5b8c48873cbfba36b73a77955fb965c9244776df9e9c2c4d2f6155bdeefe  STS.input.deft-news.txt
a19f84294325c62a2a403b59957196fd7737f86654ded0e04e0b54bc4a8bcf9e  STS.input.headlines.txt
cec1b3c08b0e4c88aeaf8dca047f5b28f4a8588eeef58475e0f16491d2bb7193  STS.input.images.txt
250d29ec9394e35443b2a73016ccc55e11b20939a3b8ee3bea9a858ba2f9adc0  STS.input.tweet-news.txt
""",
    "STS2015-en-test.zip": """
1644301a7540e5484da285002e9269062852efb2272be614cad99c9530f6a102  STS.gs.answers-forums.txt
028db213140f8c7aef7497c4ae38b6380938f20359852231669c83dce11c3701  STS.gs.answers-students.txt
5736192faaccbdbecd0ef6b73ec04b24115cd2e48d55dc3b1b170da3d2a81c75  STS.gs.belief.txt
e8e432f769c8a94ddb62ae3343890ac24a9dd78a116d56c707313bc59413dd56  STS.gs.headlines.txt
ed8878209098c77ca7f02ac413d3fd698f92ad3425999555e50fda89fc46012a  STS.gs.images.txt
fe8e460a74e8e38704ac4e6ddcedec89fd6e51cd0467d6f4301b444b259688e1  STS.input.answers-forums.txt
16eedf46fb3b29822b275a0ddcff8e873a6eb4bafba244a17c4049ffc318d62a  STS.input.answers-students.txt
6e924a19fb1abbce01a8666f07766250b46a96c89272de8e5b01d0905bc61b79  STS.input.belief.txt
779c195c54b72282bd3c8ca1dbb09a4155a39b2acd13d5cf819d8555d717cf6a  STS.input.headlines.txt
6f332542a75bcd18ea1442fc129306f746cd7ade7010ea274e763bfca576cc47  STS.input.images.txt
""",
    "Stsbenchmark.tar.gz": """
5d7e944d8b02734b07bfdb5df67db3420c64bed153fcaa1ba47ad03480cf4234  sts-dev.csv
affe45928a66ee5a708531233c95b7dacbbdc57f974f002a3d32ea0180cf816a  sts-test.csv
0f71910b59aa1ad973c5897f0791f3b0965a92b8f82b1a95f3eea9f4162fda82  sts-train.csv
""",
    "sick_train.zip": """
266cf8047149bd1d68138dd30439f3122bff30069740ac6705bb6197d9f1b48e  SICK_train.txt
""",
    "sick_trial.zip": """
5a88cfb62f8c6bd2a3cce0f2421ba2cb8c2be5ab4a800f6f01e2c64aafb7db56  SICK_trial.txt
""",
    "test_goldstandard.tar.gz": """
e1391c3b6eadd7b056965621db6b2759e3f0a97d35563ef093b856f147783b81  STSint.testinput.headlines.sent1.chunk.txt
52092c2e904ba2dce5ad25e9ec837933020fea4244d015f48a217c4bf61585fc  STSint.testinput.headlines.sent1.txt
d2ef6ce944cbbf8241545a75184bb0fcbabcafcb70b2b71fdc3aa54cf07ea638  STSint.testinput.headlines.sent2.chunk.txt
5f2b17e2925fed033918cc101c4310d44117d0b32d8bd6d96fcfd603d763da6a  STSint.testinput.headlines.sent2.txt
dc9e1a486b058c29c0732632854725690868c7c49ad96fa1854d6aa6f187956e  STSint.testinput.headlines.wa
""",
}

PINNED: dict[str, dict[str, str]] = {
    archive: {
        name: digest for digest, name in (line.split("  ", 1) for line in text.split("\n") if line)
    }
    for archive, text in _SUMS.items()
}
